//! `ralph runner` on a misbehaving scripted agent: crashes, hangs, timeouts, quota
//! exhaustion, signals, and file access outside the workspace, each asserted on the
//! result document and the exit status.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::scripted;

use ralph::engine::attempt::{OutcomeClass, StopReason};
use scripted::{Run, Scenario};

fn script(steps: &str) -> String {
    format!("default: {steps}\n")
}

/// Runs the runner on the scripted agent playing `steps`.
fn play(steps: &str) -> Run {
    run_steps(steps, &[])
}

/// Runs the runner on the scripted agent playing `steps`, with these `--idle-timeout` and
/// `--grace` (the time a cancelled agent gets before it is killed).
fn with_timeouts(steps: &str, idle: &str, grace: &str) -> Run {
    run_steps(steps, &["--idle-timeout", idle, "--grace", grace])
}

/// Runs the runner with `args` on the scripted agent playing `steps`.
fn run_steps(steps: &str, args: &[&str]) -> Run {
    Scenario::new("t", &script(steps)).args(args).run()
}

/// A scenario whose agent makes the tool call `call` (YAML fields), ending with the task-done
/// sigil when it succeeds and the task-failed sigil when it fails.
fn tool_call(call: &str) -> Scenario {
    Scenario::new(
        "t",
        &script(&format!(
            r#"[{{tool: {{{call}, ok_text: "<task-done>{{task}}</task-done>", fail_text: "<task-failed>{{task}}</task-failed>"}}}}]"#
        )),
    )
}

fn assert_sigils(run: &Run, done: Option<&str>, failed: Option<&str>) {
    let sigils = &run.result.sigils;
    assert_eq!(
        (sigils.task_done.as_deref(), sigils.task_failed.as_deref()),
        (done, failed),
        "{}",
        run.result_json
    );
}

#[test]
fn exit_1_is_a_crash_naming_the_code_and_first_stderr_line() {
    let run = play(r#"[{stderr: "fatal: disk full"}, {exit: 1}]"#);
    run.assert_outcome(OutcomeClass::Crashed);
    assert_eq!(run.result.exit_code, Some(1));
    run.assert_crash("agent exited with code 1 before answering the prompt: fatal: disk full");
    assert_eq!(run.status.code(), Some(3));
}

#[test]
fn sigkill_mid_prompt_is_a_crash_naming_the_signal() {
    let run = play(r#"[{text: "working"}, kill]"#);
    run.assert_outcome(OutcomeClass::Crashed);
    assert_eq!(run.result.signal, Some(9));
    run.assert_crash_mentions("SIGKILL");
}

#[test]
fn a_turn_with_no_output_at_all_is_a_crash() {
    let run = play("[]");
    run.assert_outcome(OutcomeClass::Crashed);
    run.assert_crash_starts_with("no output");
}

#[test]
fn a_crash_pattern_then_a_hang_is_killed_at_once() {
    let run = with_timeouts(
        r#"[{stderr: "Error: No messages returned"}, hang]"#,
        "1h",
        "1h",
    );
    run.assert_outcome(OutcomeClass::Crashed);
    run.assert_crash("crash pattern `No messages returned` on stderr: Error: No messages returned");
    assert_eq!(run.result.signal, Some(9));
}

#[test]
fn a_configured_crash_pattern_is_watched() {
    let run = run_steps(
        r#"[{stderr: "panic: widget exploded"}, hang]"#,
        &[
            "--crash-pattern",
            "widget (exploded|melted)",
            "--idle-timeout",
            "1h",
        ],
    );
    run.assert_crash_mentions("widget (exploded|melted)");
}

#[test]
fn going_silent_past_the_idle_timeout_is_cancelled_and_a_crash() {
    let run = with_timeouts(r#"[{text: "thinking"}, {silence: 1h}]"#, "300ms", "1h");
    run.assert_outcome(OutcomeClass::Crashed);
    assert_eq!(run.result.stop_reason, Some(StopReason::Cancelled));
    run.assert_crash_starts_with("idle timeout");
}

#[test]
fn a_hang_that_ignores_cancel_is_killed_after_the_grace_period() {
    let run = with_timeouts(r#"[{text: "thinking"}, hang]"#, "300ms", "200ms");
    run.assert_outcome(OutcomeClass::Crashed);
    assert_eq!(run.result.signal, Some(9));
    run.assert_crash_mentions("was killed");
}

#[test]
fn the_total_timeout_ends_a_busy_agent() {
    let run = run_steps(
        r#"[{text: "a"}, {delay: 1h}]"#,
        &["--total-timeout", "500ms", "--grace", "1h"],
    );
    run.assert_outcome(OutcomeClass::Crashed);
    run.assert_crash_starts_with("total timeout");
}

#[test]
fn claudes_usage_limit_error_is_exhaustion_with_its_reset_time() {
    let run = play(
        r#"[{error: {message: "Claude AI usage limit reached|1760000000", error_kind: usage_limit}}]"#,
    );
    run.assert_outcome(OutcomeClass::Exhausted);
    let exhaustion = run.result.exhaustion.expect("exhaustion");
    assert_eq!(exhaustion.reset_at, Some(1_760_000_000));
    assert_eq!(run.status.code(), Some(4));
}

#[test]
fn a_usage_limit_in_the_agents_prose_is_not_exhaustion() {
    let run = play(
        r#"[{text: "The log said: Claude AI usage limit reached|1760000000 and insufficient_quota."}]"#,
    );
    run.assert_outcome(OutcomeClass::Finished);
    assert_eq!(run.result.exhaustion, None);
}

#[test]
fn a_usage_limit_on_stderr_is_exhaustion_not_a_crash() {
    let run = play(
        r#"[{stderr: "{\"type\":\"usage_limit_reached\",\"resets_at\":1760003600}"}, {exit: 1}]"#,
    );
    run.assert_outcome(OutcomeClass::Exhausted);
    assert_eq!(
        run.result.exhaustion.and_then(|e| e.reset_at),
        Some(1_760_003_600)
    );
}

#[test]
fn a_rate_limit_prompt_error_without_a_reset_time_is_a_crash() {
    let run = play(
        r#"[{error: {message: "API Error: 429 Too many requests, please slow down", error_kind: rate_limit}}]"#,
    );
    run.assert_outcome(OutcomeClass::Crashed);
    assert_eq!(run.result.exhaustion, None);
}

#[test]
fn a_rate_limit_prompt_error_with_retry_after_rests_that_long() {
    let before = ralph::clock::now_ms() / 1000;
    let run = play(
        r#"[{error: {message: "API Error: 429 Too many requests, please slow down; retry-after: 7", error_kind: rate_limit}}]"#,
    );
    run.assert_outcome(OutcomeClass::Exhausted);
    let reset_at = run
        .result
        .exhaustion
        .and_then(|e| e.reset_at)
        .unwrap_or_default();
    assert!((before + 7..=before + 9).contains(&reset_at), "{reset_at}");
}

#[test]
fn any_other_prompt_error_is_a_crash() {
    let run = play(r#"[{error: {code: -32603, message: "API Error: 500"}}]"#);
    run.assert_outcome(OutcomeClass::Crashed);
    run.assert_crash("the agent answered the prompt with error -32603: API Error: 500");
}

#[test]
fn sigterm_to_the_runner_cancels_the_attempt() {
    let scenario =
        Scenario::new("t", &script(r#"[{text: "working"}, {delay: 1h}]"#)).args(&["--grace", "1h"]);
    let (child, stdout) = scenario.start_until("agent_message_chunk");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal the runner");
    let run = scenario.wait(child, stdout);
    run.assert_outcome(OutcomeClass::Cancelled);
    assert_eq!(run.result.stop_reason, Some(StopReason::Cancelled));
    assert_eq!(run.status.code(), Some(5));
}

#[test]
fn a_permissioned_write_inside_the_workspace_is_allowed() {
    let scenario = tool_call(r#"path: notes/out.txt, write: "hello""#);
    let run = scenario.run();
    assert_sigils(&run, Some("t"), None);
    let written =
        std::fs::read_to_string(scenario.workspace().join("notes/out.txt")).expect("file");
    assert_eq!(written, "hello");
}

#[test]
fn a_write_matching_a_deny_pattern_is_refused() {
    let scenario = tool_call(r#"path: secrets.env, write: "x""#).args(&["--deny", "secrets.*"]);
    let run = scenario.run();
    assert_sigils(&run, None, Some("t"));
    assert!(!scenario.workspace().join("secrets.env").exists());
    assert!(run.stdout.contains(r#""allowed":false"#));
}

#[test]
fn a_write_outside_the_workspace_is_refused() {
    let scenario = tool_call(r#"path: ../escaped.txt, write: "x""#);
    let run = scenario.run();
    assert_sigils(&run, None, Some("t"));
    assert!(!scenario.path("escaped.txt").exists());
}

#[test]
fn a_write_through_a_symlink_out_of_the_workspace_is_refused() {
    let scenario = tool_call(r#"path: link/escaped.txt, write: "x""#);
    std::fs::create_dir(scenario.path("outside")).expect("outside dir");
    std::os::unix::fs::symlink(scenario.path("outside"), scenario.workspace().join("link"))
        .expect("symlink");
    let run = scenario.run();
    assert_sigils(&run, None, Some("t"));
    assert!(!scenario.path("outside/escaped.txt").exists());
}

#[test]
fn a_file_inside_the_workspace_can_be_read() {
    let scenario = tool_call("path: input.txt, read: true");
    std::fs::write(scenario.workspace().join("input.txt"), "data").expect("input");
    let run = scenario.run();
    assert_sigils(&run, Some("t"), None);
}

#[test]
fn the_heartbeat_file_is_touched() {
    let scenario = Scenario::new("t", &script(r#"[{text: "hi"}]"#));
    let heartbeat = scenario.path("heartbeat");
    let scenario = scenario.args(&["--heartbeat-file", heartbeat.to_str().expect("utf-8 path")]);
    scenario.run();
    let content = std::fs::read_to_string(&heartbeat).expect("heartbeat file");
    assert!(
        content.trim().parse::<i64>().is_ok(),
        "heartbeat holds {content:?}"
    );
}

#[test]
fn a_runner_whose_parent_is_killed_cancels_the_attempt() {
    let scenario = Scenario::new("t", &script(r#"[{text: "working"}, {delay: 1h}]"#)).args(&[
        "--die-with-parent",
        "--grace",
        "1h",
    ]);
    let log = scenario.path("runner.log");
    // The parent: a shell that starts the runner and waits for it.
    let mut parent = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#""$@" > "$0" 2>&1 & wait"#)
        .arg(&log)
        .arg(scripted::ralph())
        .args(scenario.runner_args())
        .spawn()
        .expect("start the parent shell");
    wait_for(|| {
        std::fs::read_to_string(&log).is_ok_and(|text| text.contains("agent_message_chunk"))
    });
    parent.kill().expect("kill -9 the parent");
    parent.wait().expect("reap the parent");
    wait_for(|| scenario.read_result().is_some());
    let result = scenario.read_result().expect("result");
    assert_eq!(result.outcome, OutcomeClass::Cancelled);
    assert_eq!(result.stop_reason, Some(StopReason::Cancelled));
}

/// Polls until `done` (a safety net of one minute turns a hang into a failure).
fn wait_for(mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "gave up waiting");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_usage_limit_on_stderr_stops_a_hanging_agent_at_once() {
    let run = with_timeouts(
        r#"[{stderr: "Claude AI usage limit reached|1760000000"}, hang]"#,
        "1h",
        "1h",
    );
    run.assert_outcome(OutcomeClass::Exhausted);
    assert_eq!(run.result.signal, Some(9));
}
