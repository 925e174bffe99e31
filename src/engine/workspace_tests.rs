use super::*;
use crate::engine::conclusion::{NextState, TaskState};
use crate::engine::dag::TaskPhase;
use crate::engine::policy::FeatureEffect;
use crate::engine::testing::{self, conclude_with_workspace, reported};

fn report_saying(outcome: WorkspaceOutcome, message: &str) -> WorkspaceReport {
    WorkspaceReport {
        message: Some(message.to_owned()),
        ..WorkspaceReport::new(outcome)
    }
}

fn conflict() -> WorkspaceReport {
    WorkspaceReport {
        conflict_files: vec!["src/lib.rs".to_owned()],
        conflicting_tasks: vec!["other".to_owned()],
        feature_head: Some("abc".to_owned()),
        ..WorkspaceReport::new(WorkspaceOutcome::Conflict)
    }
}

fn done_with(report: &WorkspaceReport, retry_count: u32) -> NextState {
    let task = TaskState {
        retry_count,
        ..testing::task_state()
    };
    conclude_with_workspace(&reported(testing::done("t")), Some(report), &task)
}

#[test]
fn a_done_attempt_whose_work_integrated_is_done() {
    let next = done_with(&WorkspaceReport::new(WorkspaceOutcome::Integrated), 0);
    assert_eq!(next.phase, TaskPhase::Done);
    assert_eq!(next.outcome(), AttemptOutcome::Done);
}

#[test]
fn a_done_attempt_that_changed_nothing_is_still_done() {
    let next = done_with(&WorkspaceReport::new(WorkspaceOutcome::Unchanged), 0);
    assert_eq!(next.phase, TaskPhase::Done);
}

#[test]
fn a_conflict_sends_the_task_back_to_pending_as_a_retry_with_files_and_task_in_the_prompt() {
    let next = done_with(&conflict(), 0);
    assert_eq!(next.phase, TaskPhase::Pending);
    assert_eq!(next.outcome(), AttemptOutcome::Conflict);
    assert_eq!(next.retry_count, 1);
    assert!(next.next_attempt_after_ms.is_some());
    let prompt_line = next.previous_attempt.expect("previous attempt").to_string();
    assert!(prompt_line.contains("src/lib.rs"), "{prompt_line}");
    assert!(prompt_line.contains("task other"), "{prompt_line}");
}

#[test]
fn a_conflict_without_retries_left_fails_the_task() {
    let next = done_with(&conflict(), 2);
    assert_eq!(next.phase, TaskPhase::Failed);
    assert_eq!(next.outcome(), AttemptOutcome::Conflict);
}

#[test]
fn a_failed_integration_is_retried_like_a_crash_naming_the_git_error() {
    let report = report_saying(
        WorkspaceOutcome::Failed,
        "cannot reach https://git.example/r.git",
    );
    let next = done_with(&report, 0);
    assert_eq!(next.phase, TaskPhase::Pending);
    assert_eq!(next.outcome(), AttemptOutcome::Crashed);
    assert!(next.crash.is_some_and(|c| c.contains("cannot reach")));
}

#[test]
fn a_git_misconfiguration_halts_the_feature_without_charging_a_retry() {
    let report = report_saying(
        WorkspaceOutcome::Misconfigured,
        "Secret repo-creds: wrong token",
    );
    let next = done_with(&report, 0);
    assert_eq!(next.outcome(), AttemptOutcome::Misconfigured);
    assert_eq!(next.retry_count, 0);
    assert!(
        matches!(next.feature(), FeatureEffect::Halt { reason } if reason.contains("repo-creds"))
    );
}

#[test]
fn a_report_does_not_change_an_attempt_that_was_not_done() {
    let next = conclude_with_workspace(
        &reported(testing::failed("t", Some("tests fail"))),
        Some(&WorkspaceReport::new(WorkspaceOutcome::NotCommitted)),
        &testing::task_state(),
    );
    assert_eq!(next.outcome(), AttemptOutcome::Failed);
}

#[test]
fn only_a_done_verdict_for_the_task_integrates() {
    assert!(integrates(&testing::done("t")));
    assert!(!integrates(&testing::failed("t", None)));
    assert!(!integrates(&testing::crashed("t", "exit 1")));
    assert!(!integrates(&testing::result("t")));
}

#[test]
fn task_names_come_from_the_git_layers_commit_subjects() {
    let subjects = [
        "a: work of attempt 1",
        "merge from upstream",
        "b: work of attempt 2",
        "a: work of attempt 3",
    ];
    assert_eq!(tasks_in_subjects(subjects), vec!["a", "b"]);
}

#[test]
fn a_bounded_report_fits_a_termination_message() {
    let report = WorkspaceReport {
        conflict_files: (0..500).map(|i| format!("dir/file-{i:04}.rs")).collect(),
        message: Some("é".repeat(4000)),
        ..WorkspaceReport::new(WorkspaceOutcome::Conflict)
    }
    .bounded();
    let json = serde_json::to_string(&report).expect("serializes");
    assert!(json.len() < 2048, "{} bytes", json.len());
}

fn verdict(verdict: crate::engine::sigils::Verdict) -> AttemptResult {
    testing::with_sigils(
        "api",
        crate::engine::sigils::Sigils {
            verdict: Some(verdict),
            ..Default::default()
        },
    )
}

#[test]
fn a_work_attempts_done_verdict_commits_its_work() {
    assert!(finish_commits(AttemptKind::Work, &testing::done("api")));
    assert!(!finish_commits(
        AttemptKind::Work,
        &testing::failed("api", None)
    ));
}

#[test]
fn a_verifications_pass_commits_the_work_and_its_rejection_does_not() {
    use crate::engine::sigils::Verdict;
    assert!(finish_commits(
        AttemptKind::Verify,
        &verdict(Verdict::Pass("api".to_owned()))
    ));
    assert!(!finish_commits(
        AttemptKind::Verify,
        &verdict(Verdict::Fail("api".to_owned()))
    ));
    assert!(!finish_commits(AttemptKind::Verify, &testing::done("api")));
}
