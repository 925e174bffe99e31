//! Kubernetes name rules the API enforces on task and feature names.

/// Regular expression of an RFC 1123 DNS label: lower-case alphanumerics and `-`,
/// starting and ending with an alphanumeric.
pub const DNS_LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// Longest RFC 1123 DNS label.
pub const DNS_LABEL_MAX_LEN: usize = 63;

/// Regular expression of an RFC 1123 DNS subdomain (dot-separated DNS labels).
pub const DNS_SUBDOMAIN_PATTERN: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Longest RFC 1123 DNS subdomain (the longest Kubernetes object name).
pub const DNS_SUBDOMAIN_MAX_LEN: usize = 253;

/// True when `part` matches [`DNS_LABEL_PATTERN`] (length aside).
fn is_label_shaped(part: &str) -> bool {
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    part.chars().all(|c| alphanumeric(c) || c == '-')
        && part.starts_with(alphanumeric)
        && part.ends_with(alphanumeric)
}

/// Checks that `name` is an RFC 1123 DNS label; the error says what is wrong.
pub fn check_dns_label(name: &str) -> Result<(), String> {
    check_name(
        name,
        DNS_LABEL_MAX_LEN,
        is_label_shaped(name),
        "lower-case letters, digits and '-'",
    )
}

/// Checks that `name` is an RFC 1123 DNS subdomain; the error says what is wrong.
pub fn check_dns_subdomain(name: &str) -> Result<(), String> {
    check_name(
        name,
        DNS_SUBDOMAIN_MAX_LEN,
        name.split('.').all(is_label_shaped),
        "lower-case letters, digits, '-' and '.'",
    )
}

/// Checks that `name` is not empty, at most `max_len` long, and `shaped` (made of
/// `characters`, starting and ending with a letter or digit).
fn check_name(name: &str, max_len: usize, shaped: bool, characters: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > max_len {
        return Err(format!(
            "is {} characters long, the limit is {max_len}",
            name.len()
        ));
    }
    if !shaped {
        return Err(format!(
            "must consist of {characters}, and start and end with a letter or digit"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_label_accepts_lowercase_words_joined_by_dashes() {
        assert_eq!(check_dns_label("write-test-2"), Ok(()));
    }

    #[test]
    fn dns_label_rejects_upper_case() {
        assert!(check_dns_label("WriteTest").is_err());
    }

    #[test]
    fn dns_label_rejects_leading_and_trailing_dash() {
        assert!(check_dns_label("-a").is_err());
        assert!(check_dns_label("a-").is_err());
    }

    #[test]
    fn dns_label_rejects_dots_and_underscores() {
        assert!(check_dns_label("a.b").is_err());
        assert!(check_dns_label("a_b").is_err());
    }

    #[test]
    fn dns_label_rejects_empty_and_too_long_names() {
        assert!(check_dns_label("").is_err());
        assert_eq!(check_dns_label(&"a".repeat(63)), Ok(()));
        let error = check_dns_label(&"a".repeat(64)).unwrap_err();
        assert!(error.contains("64 characters"), "{error}");
    }

    #[test]
    fn the_hand_written_checks_agree_with_the_published_patterns() {
        let label = regex::Regex::new(DNS_LABEL_PATTERN).ok();
        let subdomain = regex::Regex::new(DNS_SUBDOMAIN_PATTERN).ok();
        let samples = [
            "a", "a-b", "a.b", "-a", "a-", "A", "a_b", "a..b", "9x", "a.-b", "x.y.z",
        ];
        for sample in samples {
            assert_eq!(
                label.as_ref().map(|r| r.is_match(sample)),
                Some(check_dns_label(sample).is_ok()),
                "label {sample}"
            );
            assert_eq!(
                subdomain.as_ref().map(|r| r.is_match(sample)),
                Some(check_dns_subdomain(sample).is_ok()),
                "subdomain {sample}"
            );
        }
    }

    #[test]
    fn dns_subdomain_accepts_dotted_labels() {
        assert_eq!(check_dns_subdomain("hello.write-test"), Ok(()));
        assert!(check_dns_subdomain("hello..x").is_err());
    }
}
