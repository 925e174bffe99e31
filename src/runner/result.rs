//! Writing the result document, never over [`RESULT_MAX_BYTES`]: long free-text fields
//! are shortened first (and named in `truncated`).

use std::path::Path;

use super::error::RunnerError;
use super::events::char_prefix;
use crate::engine::attempt::{AttemptResult, RESULT_MAX_BYTES};

/// One way of making the document smaller: the field it touches and the edit.
type Shrink = (&'static str, fn(&mut AttemptResult, usize) -> bool);

/// Shrinking steps in the order they are tried, each at decreasing lengths. The agent's
/// journal notes go last: the next attempts and the tasks that build on this one read them.
const SHRINKS: &[Shrink] = &[
    ("crash", |r, max| shorten_opt(&mut r.crash, max)),
    ("confinement.problems", |r, max| match &mut r.confinement {
        Some(confinement) => confinement
            .problems
            .iter_mut()
            .fold(false, |changed, problem| shorten(problem, max) | changed),
        None => false,
    }),
    ("exhaustion.message", |r, max| match &mut r.exhaustion {
        Some(exhaustion) => shorten(&mut exhaustion.message, max),
        None => false,
    }),
    ("sigils.promiseReason", |r, max| {
        shorten_opt(&mut r.sigils.promise_reason, max)
    }),
    ("sigils.taskFailedReason", |r, max| {
        shorten_opt(&mut r.sigils.task_failed_reason, max)
    }),
    ("sigils.verifyFailReason", |r, max| {
        shorten_opt(&mut r.sigils.verify_fail_reason, max)
    }),
    ("check.outputTail", |r, max| match &mut r.check {
        Some(check) => keep_end(&mut check.output_tail, max),
        None => false,
    }),
    ("sigils.knowledge", |r, max| {
        r.sigils.knowledge.iter_mut().fold(false, |changed, entry| {
            shorten(&mut entry.body, max) | changed
        })
    }),
    ("sigils.journal", |r, max| {
        r.sigils
            .journal
            .iter_mut()
            .fold(false, |changed, entry| shorten(entry, max) | changed)
    }),
];

/// Last resorts, when shortening text was not enough; each is repeated while it changes
/// something and the document is still too large. Whole notes go one at a time, knowledge
/// before the journal, the earliest first (the last notes usually sum up the attempt).
const DROPS: &[Shrink] = &[
    ("sigils.knowledge", |r, _| {
        !r.sigils.knowledge.is_empty() && {
            r.sigils.knowledge.remove(0);
            true
        }
    }),
    ("sigils.journal", |r, _| {
        !r.sigils.journal.is_empty() && {
            r.sigils.journal.remove(0);
            true
        }
    }),
    ("sigils.taskDone", |r, max| {
        shorten_opt(&mut r.sigils.task_done, max)
    }),
    ("sigils.taskFailed", |r, max| {
        shorten_opt(&mut r.sigils.task_failed, max)
    }),
    ("sigils.nextModel", |r, max| {
        shorten_opt(&mut r.sigils.next_model, max)
    }),
    ("agent", |r, max| shorten_opt(&mut r.ran_by.agent, max)),
    ("model", |r, max| shorten_opt(&mut r.ran_by.model, max)),
];

/// The result as it will be written: at most [`RESULT_MAX_BYTES`] of JSON, with the
/// shortened fields listed in `truncated`.
pub fn fit_result(mut result: AttemptResult) -> Result<(AttemptResult, String), RunnerError> {
    let mut json = serde_json::to_string(&result)?;
    for max in [1024, 256, 64] {
        for (field, shrink) in SHRINKS {
            if json.len() <= RESULT_MAX_BYTES {
                return Ok((result, json));
            }
            if shrink(&mut result, max) {
                mark(&mut result, field);
                json = serde_json::to_string(&result)?;
            }
        }
    }
    for (field, drop) in DROPS {
        while json.len() > RESULT_MAX_BYTES && drop(&mut result, 64) {
            mark(&mut result, field);
            json = serde_json::to_string(&result)?;
        }
    }
    Ok((result, json))
}

/// Writes the fitted result to `path` and returns what was written.
pub fn write_result(result: AttemptResult, path: &Path) -> Result<AttemptResult, RunnerError> {
    let (result, json) = fit_result(result)?;
    std::fs::write(path, json).map_err(|source| RunnerError::WriteResult {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(result)
}

fn mark(result: &mut AttemptResult, field: &str) {
    if !result.truncated.iter().any(|name| name == field) {
        result.truncated.push(field.to_string());
    }
}

fn shorten_opt(text: &mut Option<String>, max: usize) -> bool {
    text.as_mut().is_some_and(|text| shorten(text, max))
}

fn shorten(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let head = char_prefix(text, max).to_string();
    *text = format!("{head}…");
    true
}

/// Shortens `text` to its last `max` bytes or fewer (a command's output matters at its end).
fn keep_end(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let mut cut = text.len() - max;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    *text = format!("…{}", &text[cut..]);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::attempt::OutcomeClass;
    use crate::engine::sigils::{Knowledge, Sigils};

    fn result() -> AttemptResult {
        AttemptResult::new("t", Some("t-a1".into()), OutcomeClass::Finished)
    }

    #[test]
    fn a_small_result_is_written_unchanged() {
        let (fitted, json) = fit_result(result()).unwrap();
        assert_eq!(fitted, result());
        assert_eq!(json, serde_json::to_string(&result()).unwrap());
    }

    #[test]
    fn long_confinement_problems_are_shortened_and_named() {
        let mut long = result();
        long.confinement = Some(crate::engine::attempt::ConfinementReport {
            problems: vec!["the runner's file lies in the workspace ".repeat(60); 3],
            ..Default::default()
        });
        let (fitted, json) = fit_result(long).unwrap();
        assert!(json.len() <= RESULT_MAX_BYTES);
        assert_eq!(fitted.truncated, vec!["confinement.problems"]);
        assert_eq!(fitted.confinement.unwrap().problems.len(), 3);
    }

    #[test]
    fn a_long_crash_summary_is_shortened_first_and_named() {
        let mut long = result();
        long.crash = Some("boom ".repeat(2000));
        long.sigils.journal = vec!["kept".into()];
        let (fitted, json) = fit_result(long).unwrap();
        assert!(json.len() <= RESULT_MAX_BYTES);
        assert_eq!(fitted.truncated, vec!["crash"]);
        assert_eq!(fitted.sigils.journal, vec!["kept"]);
    }

    #[test]
    fn many_long_fields_all_fit_under_the_cap() {
        let mut long = result();
        long.crash = Some("c".repeat(5000));
        long.sigils.promise_reason = Some("p".repeat(5000));
        long.sigils.journal = vec!["j".repeat(3000); 40];
        long.sigils.knowledge = vec![
            Knowledge {
                tags: vec!["a".into()],
                title: "t".into(),
                body: "k".repeat(3000),
            };
            40
        ];
        let (fitted, json) = fit_result(long).unwrap();
        assert!(json.len() <= RESULT_MAX_BYTES, "{} bytes", json.len());
        for field in [
            "crash",
            "sigils.promiseReason",
            "sigils.journal",
            "sigils.knowledge",
        ] {
            assert!(
                fitted.truncated.iter().any(|name| name == field),
                "{field} not listed"
            );
        }
    }

    #[test]
    fn journal_notes_are_shortened_after_every_other_text() {
        let mut long = result();
        long.crash = Some("c".repeat(2000));
        long.exhaustion = Some(crate::engine::attempt::Exhaustion {
            message: "e".repeat(2000),
            reset_at: None,
        });
        long.sigils.knowledge = vec![Knowledge {
            tags: vec![],
            title: "t".into(),
            body: "k".repeat(2000),
        }];
        long.sigils.journal = vec!["j".repeat(900)];
        let (fitted, json) = fit_result(long).unwrap();
        assert!(json.len() <= RESULT_MAX_BYTES);
        assert_eq!(fitted.sigils.journal, vec!["j".repeat(900)]);
        assert!(!fitted.truncated.iter().any(|name| name == "sigils.journal"));
    }

    #[test]
    fn when_notes_must_go_the_latest_journal_notes_stay() {
        let mut long = result();
        long.sigils.journal = (0..120)
            .map(|n| format!("note {n:03} {}", "x".repeat(40)))
            .collect();
        let (fitted, json) = fit_result(long).unwrap();
        assert!(json.len() <= RESULT_MAX_BYTES);
        assert!(
            fitted
                .sigils
                .journal
                .last()
                .is_some_and(|n| n.starts_with("note 119"))
        );
        assert!(
            fitted.sigils.journal.len() > 10,
            "{} notes kept",
            fitted.sigils.journal.len()
        );
        assert!(fitted.truncated.iter().any(|name| name == "sigils.journal"));
    }

    #[test]
    fn the_written_file_holds_the_fitted_document() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("result.json");
        let mut long = result();
        long.crash = Some("x".repeat(10_000));
        let written = write_result(long, &path).unwrap();
        let read: AttemptResult =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(read, written);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        #[test]
        fn any_result_fits_under_the_cap(
            crash in proptest::option::of(".{0,6000}"),
            reason in proptest::option::of(".{0,6000}"),
            journal in proptest::collection::vec(".{0,3000}", 0..30),
            knowledge in proptest::collection::vec(".{0,3000}", 0..30),
            task_done in proptest::option::of("[a-z-]{0,2000}"),
        ) {
            let mut long = result();
            long.crash = crash;
            long.sigils.promise_reason = reason;
            long.sigils.journal = journal;
            long.sigils.knowledge = knowledge
                .into_iter()
                .map(|body| Knowledge { tags: vec![], title: "t".into(), body })
                .collect();
            long.sigils.task_done = task_done;
            let (fitted, json) = fit_result(long).unwrap();
            proptest::prop_assert!(json.len() <= RESULT_MAX_BYTES, "{} bytes", json.len());
            proptest::prop_assert_eq!(serde_json::to_string(&fitted).unwrap(), json);
        }
    }

    #[test]
    fn a_long_check_output_keeps_its_end_and_the_result_fits() {
        let result = AttemptResult {
            check: Some(crate::engine::verification::CheckReport {
                command: "cargo test".into(),
                exit_code: Some(101),
                output_tail: format!("{}the last line", "x".repeat(2_000)),
                ..Default::default()
            }),
            sigils: Sigils {
                journal: vec!["j".repeat(2_000)],
                ..Sigils::default()
            },
            ..result()
        };
        let (fitted, json) = fit_result(result).unwrap();
        assert!(json.len() <= RESULT_MAX_BYTES);
        let tail = &fitted.check.as_ref().unwrap().output_tail;
        assert!(tail.ends_with("the last line"), "{tail}");
        assert!(fitted.truncated.contains(&"check.outputTail".to_string()));
    }
}
