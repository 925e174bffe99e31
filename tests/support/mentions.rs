//! One assertion for messages meant for people (API statuses, conditions, Events, outcome
//! messages): they mention what they must. Include with
//! `#[path = "support/mentions.rs"] mod mentions;`.

/// Asserts that `text` mentions every one of `parts`, naming the missing ones.
pub fn assert_mentions(text: &str, parts: &[&str]) {
    let missing: Vec<&&str> = parts.iter().filter(|part| !text.contains(**part)).collect();
    assert!(missing.is_empty(), "{missing:?} not in {text:?}");
}
