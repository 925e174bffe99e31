//! `ralph runner` confining the agent with Landlock (docs/security.md): the scripted agent
//! runs shell commands without asking, as an agent that approves its own tool calls does,
//! and only the kernel stands between it and the files outside its grants. These tests
//! need Landlock (this machine's kernel has ABI 7); they fail, not skip, without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::scripted;

use std::path::Path;
use std::time::{Duration, Instant};

use ralph::engine::attempt::{LandlockState, OutcomeClass};
use scripted::{Run, Scenario};

/// The scripted agent of task `t`: runs `commands` in its workspace without asking, then
/// reports the task done.
fn running(commands: &[&str]) -> Scenario {
    let steps: String = commands
        .iter()
        .map(|command| format!("  - shell: {}\n", serde_json::to_string(command).unwrap()))
        .collect();
    Scenario::new(
        "t",
        &format!("default:\n{steps}  - text: \"Done. <task-done>t</task-done>\"\n"),
    )
}

/// The text the agent sent (the `shell exit` lines of its commands among it).
fn agent_text(run: &Run) -> String {
    run.stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["kind"] == "agent_message_chunk")
        .filter_map(|event| {
            event["update"]["content"]["text"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// Asserts that the kernel confined the agent with Landlock.
#[track_caller]
fn assert_enforced(run: &Run) {
    let confinement = run
        .result
        .confinement
        .clone()
        .unwrap_or_else(|| panic!("no confinement in the result: {}", run.result_json));
    assert_eq!(
        confinement.landlock,
        LandlockState::Enforced,
        "{}\n{}",
        run.result_json,
        run.stderr
    );
}

/// Asserts that the agent's text holds `part` (its commands' `shell exit` lines).
#[track_caller]
fn assert_agent_said(run: &Run, part: &str) {
    let text = agent_text(run);
    assert!(text.contains(part), "{text}");
}

/// Asserts that the agent's command wrote `file`.
#[track_caller]
fn assert_written(run: &Run, file: &Path) {
    assert!(
        file.exists(),
        "{} missing: {}",
        file.display(),
        agent_text(run)
    );
}

/// Asserts that Landlock confined the agent and refused one of its commands a write.
#[track_caller]
fn assert_refused_by_the_kernel(run: &Run) {
    assert_enforced(run);
    assert_agent_said(run, "Permission denied");
}

/// A directory outside the scenario's workspace, HOME and temp directory.
fn elsewhere() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn quoted(path: &Path) -> String {
    format!("'{}'", path.display())
}

#[test]
fn a_shell_write_outside_the_workspace_is_refused_by_the_kernel() {
    let outside = elsewhere();
    let target = outside.path().join("escaped.txt");
    let scenario = running(&[&format!("echo x > {}", quoted(&target))]);

    let run = scenario.run();

    assert!(!target.exists(), "the agent wrote outside\n{}", run.stdout);
    assert_refused_by_the_kernel(&run);
}

#[test]
fn a_shell_write_inside_the_workspace_still_works() {
    let scenario = running(&["mkdir -p src && echo hello > src/greeting.txt"]);

    let run = scenario.run();

    run.assert_outcome(OutcomeClass::Finished);
    assert_enforced(&run);
    let written = std::fs::read_to_string(scenario.workspace().join("src/greeting.txt"));
    assert_eq!(written.unwrap(), "hello\n", "{}", agent_text(&run));
}

#[test]
fn the_agent_writes_its_home_and_its_own_temp_directory() {
    let home = elsewhere();
    let scenario = running(&[r#"echo t > "$TMPDIR/scratch" && echo h > "$HOME/.agent-config""#])
        .env("HOME", home.path());

    let run = scenario.run();

    assert_enforced(&run);
    assert_agent_said(&run, "shell exit 0");
    assert!(home.path().join(".agent-config").exists());
}

#[test]
fn the_shared_temp_directory_is_not_the_agents() {
    let scenario = running(&[r#"echo x > "/tmp/ralph-confinement-probe-$$""#]);

    let run = scenario.run();

    assert_refused_by_the_kernel(&run);
}

#[test]
fn a_verifier_cannot_write_its_workspace_and_still_gives_its_verdict() {
    let scenario = running(&["echo fixed > repaired.txt"]).args(&["--read-only"]);

    let run = scenario.run();

    assert!(!scenario.workspace().join("repaired.txt").exists());
    assert_enforced(&run);
    run.assert_outcome(OutcomeClass::Finished);
    assert_eq!(run.result.sigils.task_done.as_deref(), Some("t"));
}

#[test]
fn the_runners_result_file_in_the_agents_home_is_out_of_its_reach() {
    let scenario = running(&[r#"echo forged > "$HOME/result.json""#]);
    let home = scenario.dir.path().to_path_buf();
    let scenario = scenario.env("HOME", &home);

    let run = scenario.run();

    assert_enforced(&run);
    assert!(
        run.result_json.contains("\"outcome\""),
        "the result was forged: {}",
        run.result_json
    );
    assert_agent_said(&run, "Permission denied");
}

#[test]
fn a_symlinked_workspace_confines_the_agent_to_its_target() {
    let outside = elsewhere();
    let target = outside.path().join("escaped.txt");
    let scenario = running(&[
        "echo in > inside.txt",
        &format!("echo out > {}", quoted(&target)),
    ]);
    let link = scenario.path("workspace-link");
    std::os::unix::fs::symlink(scenario.workspace(), &link).unwrap();
    let scenario = scenario.workspace_dir(link.to_str().unwrap());

    let run = scenario.run();

    assert_enforced(&run);
    assert_written(&run, &scenario.workspace().join("inside.txt"));
    assert!(!target.exists());
}

#[test]
fn a_workspace_path_with_dot_dot_is_resolved() {
    let scenario = running(&["echo in > inside.txt"]);
    std::fs::create_dir(scenario.path("sub")).unwrap();
    let winding = scenario.path("sub/../workspace");
    let scenario = scenario.workspace_dir(winding.to_str().unwrap());

    let run = scenario.run();

    assert_enforced(&run);
    assert_written(&run, &scenario.workspace().join("inside.txt"));
}

#[test]
fn a_home_inside_the_workspace_works_for_a_work_attempt() {
    let scenario = running(&[r#"echo h > "$HOME/config""#]);
    let home = scenario.workspace().join(".home");
    std::fs::create_dir(&home).unwrap();
    let scenario = scenario.env("HOME", &home);

    let run = scenario.run();

    assert_enforced(&run);
    assert_written(&run, &home.join("config"));
}

#[test]
fn a_verifiers_home_inside_the_workspace_is_reported_as_a_weakness() {
    let scenario = running(&[r#"echo h > "$HOME/config""#]).args(&["--read-only"]);
    let home = scenario.workspace().join(".home");
    std::fs::create_dir(&home).unwrap();
    let scenario = scenario.env("HOME", &home);

    let run = scenario.run();

    let confinement = run.result.confinement.clone().unwrap();
    assert!(
        confinement
            .problems
            .iter()
            .any(|p| p.contains("set HOME outside the workspace")),
        "{confinement:?}"
    );
    assert_written(&run, &home.join("config"));
}

#[test]
fn a_daemon_the_agent_forks_stays_confined() {
    let outside = elsewhere();
    let late = outside.path().join("late.txt");
    let daemon = format!(
        "setsid sh -c 'echo x > {}; echo ran > daemon-ran; sleep 30' > /dev/null 2>&1 < /dev/null &",
        late.display()
    );
    let scenario = running(&[&daemon, "sleep 1"]);

    let run = scenario.run();

    assert_enforced(&run);
    assert_written(&run, &scenario.workspace().join("daemon-ran"));
    assert!(!late.exists(), "the daemon wrote outside the workspace");
}

#[test]
fn a_daemon_the_agent_leaves_behind_is_killed_when_the_attempt_ends() {
    let daemon =
        "setsid sh -c 'echo $$ > daemon.pid; exec sleep 60' > /dev/null 2>&1 < /dev/null &";
    let scenario = running(&[daemon, "sleep 0.5"]);

    let run = scenario.run();

    let pid = std::fs::read_to_string(scenario.workspace().join("daemon.pid")).unwrap();
    let alive = || {
        std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
            .is_ok_and(|stat| !stat.contains(") Z "))
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(), "the daemon {} still runs", pid.trim());
    assert!(run.stderr.contains("killed them"), "{}", run.stderr);
}

#[test]
fn an_agent_cannot_lift_its_confinement() {
    let outside = elsewhere();
    let target = outside.path().join("escaped.txt");
    let scenario = running(&[
        "grep NoNewPrivs /proc/self/status > privileges.txt",
        &format!(
            "unshare --user --map-root-user sh -c 'echo x > {}'",
            target.display()
        ),
    ]);

    let run = scenario.run();

    assert_enforced(&run);
    let privileges = std::fs::read_to_string(scenario.workspace().join("privileges.txt"));
    assert_eq!(privileges.unwrap().split_whitespace().last(), Some("1"));
    assert!(!target.exists(), "{}", agent_text(&run));
}

#[test]
fn with_confinement_disabled_only_the_permission_answers_guard_and_that_is_reported() {
    let outside = elsewhere();
    let target = outside.path().join("escaped.txt");
    let scenario =
        running(&[&format!("echo x > {}", quoted(&target))]).args(&["--confinement", "disabled"]);

    let run = scenario.run();

    assert!(target.exists(), "the write outside was the control case");
    let confinement = run.result.confinement.clone().unwrap();
    assert_eq!(confinement.landlock, LandlockState::Disabled);
    assert!(
        confinement.problems[0].contains("confinement is disabled"),
        "{confinement:?}"
    );
}

#[test]
fn the_agent_works_in_its_asking_mode_and_verifies_in_its_read_only_mode() {
    let worker = running(&["true"]).run();
    let verifier = running(&["true"]).args(&["--read-only"]).run();

    assert_eq!(worker.result.ran_by.agent_mode.as_deref(), Some("default"));
    assert_eq!(verifier.result.ran_by.agent_mode.as_deref(), Some("plan"));
    assert!(worker.result.confinement.unwrap().is_confined());
}

#[test]
fn required_confinement_runs_the_agent_confined_where_the_kernel_has_landlock() {
    let outside = elsewhere();
    let target = outside.path().join("escaped.txt");
    let scenario =
        running(&[&format!("echo x > {}", quoted(&target))]).args(&["--confinement", "required"]);

    let run = scenario.run();

    run.assert_outcome(OutcomeClass::Finished);
    assert_refused_by_the_kernel(&run);
    assert!(!target.exists());
}
