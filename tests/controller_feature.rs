//! The controller against the fake API server, the test standing in for the kubelet:
//! a Feature runs to Complete in dependency order, a crash is retried, an expired claim
//! makes the attempt lost and retried, and a suspend cancels the running attempt.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support::{fake_apiserver, harness};

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use ralph::api::{AttemptOutcome, Feature, FeaturePhase};
use ralph::engine::dag::TaskPhase;
use serde_json::json;

use harness::{
    Harness, a_then_b, assert_mentions, feature_manifest, one_task, prompt_of, runner_arg,
};

/// Diamond: a; b and c after a; d after b and c.
fn diamond() -> serde_json::Value {
    json!([
        {"name": "a", "title": "Write the greeting"},
        {"name": "b", "dependsOn": ["a"]},
        {"name": "c", "dependsOn": ["a"]},
        {"name": "d", "dependsOn": ["b", "c"]}
    ])
}

/// Finishes every agent Pod that appears with its task-done sigil until the feature is
/// Complete; returns the task ids in the order their Pods appeared.
async fn run_to_completion(h: &Harness, feature: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    let deadline = tokio::time::Instant::now() + harness::PATIENCE;
    loop {
        for pod in h.agent_pods().await {
            if seen.insert(pod.name_any()) {
                order.push(runner_arg(&pod, "--task").unwrap_or_default());
                h.finish_done(&pod).await;
            }
        }
        let phase = h
            .features()
            .get(feature)
            .await
            .ok()
            .and_then(|f| f.status)
            .map(|s| s.phase);
        if phase == Some(FeaturePhase::Complete) {
            return order;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "feature {feature} did not complete; pods seen: {order:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn feature_runs_its_tasks_in_dependency_order_to_complete() {
    let h = Harness::with_feature("hello", diamond(), json!({"parallelism": 2})).await;

    let order = run_to_completion(&h, "hello").await;

    assert_eq!(order.len(), 4, "{order:?}");
    assert_eq!(order[0], "a");
    assert_eq!(order[3], "d");
    let feature = h.features().get("hello").await.expect("feature");
    let status = feature.status.expect("status");
    assert_eq!(status.counts.done, 4);
    assert_eq!(status.counts.total, 4);
    assert_eq!(status.iterations, 4);
    assert_eq!(status.usage.tokens.input, 400);
    for task in ["a", "b", "c", "d"] {
        let t = h.tasks().get(&format!("hello-{task}")).await.expect("task");
        let s = t.status.expect("task status");
        assert_eq!(s.phase, TaskPhase::Done, "task {task}");
        assert_eq!(s.attempts[0].outcome, Some(AttemptOutcome::Done));
    }
    h.stop().await;
}

#[tokio::test]
async fn finished_attempts_keep_their_pods_for_logs_and_write_no_prompt_objects() {
    let h = Harness::with_feature("tidy", diamond(), json!({"parallelism": 4})).await;
    run_to_completion(&h, "tidy").await;

    let pods: Vec<String> = h.agent_pods().await.iter().map(|p| p.name_any()).collect();
    assert_eq!(
        pods,
        ["tidy-a-a1", "tidy-b-a1", "tidy-c-a1", "tidy-d-a1"],
        "finished Pods stay for `kubectl logs` until their retention ends"
    );
    let prompts = h
        .config_maps()
        .list(&kube::api::ListParams::default().labels("ralph.dev/attempt"))
        .await
        .expect("list configmaps");
    assert!(prompts.items.is_empty(), "{:?}", prompts.items);
    h.stop().await;
}

#[tokio::test]
async fn agent_pod_gets_the_prompt_and_the_claim_lease_names_the_attempt() {
    let h = Harness::with_feature(
        "one",
        json!([{"name": "a", "title": "Greet", "description": "Write hello.txt"}]),
        json!({}),
    )
    .await;
    let pod = h.wait_for_pod("one-a-a1").await;
    let text = prompt_of(&pod);
    assert_mentions(&text, &["Write hello.txt"]);
    let lease = h.leases().get("one-a").await.expect("claim Lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("one-a-a1")
    );
    let task = h.tasks().get("one-a").await.expect("task");
    assert_eq!(task.status.map(|s| s.phase), Some(TaskPhase::Running));
    h.finish_done_to_complete(&pod, "one").await;
    h.stop().await;
}

/// The Task cache keeps no descriptions: a templated task's prompt takes its own and its
/// parent's from the Feature's templates, without reading any Task.
#[tokio::test]
async fn a_subtask_prompt_carries_its_own_and_its_parents_description() {
    let h = Harness::start().await;
    h.create_feature(feature_manifest(
        "nested",
        serde_json::json!([
            {"name": "epic", "title": "Greeter", "description": "Build the greeter service."},
            {"name": "a", "parent": "epic", "description": "Write hello.txt"}
        ]),
        serde_json::json!({}),
    ))
    .await;
    let pod = h.wait_for_pod("nested-a-a1").await;
    let text = prompt_of(&pod);
    assert!(text.contains("Write hello.txt"), "{text}");
    assert!(text.contains("Build the greeter service."), "{text}");
    assert_eq!(task_reads(&h), 0);
    h.stop().await;
}

/// GETs of a single Task the controller sent.
fn task_reads(h: &Harness) -> usize {
    h.server.count_requests(|r| {
        r.verb == fake_apiserver::Verb::Get && r.resource == "tasks" && r.name.is_some()
    })
}

/// Creates the standalone Task "solo" of Feature "loose" (created later by the test).
async fn create_solo_task(h: &Harness, description: &str) {
    h.create_task(
        "solo",
        json!({"featureRef": "loose", "description": description}),
    )
    .await;
}

/// The Task cache keeps no descriptions, but a standalone Task's is kept from its watch
/// while it may run: the attempt starts without reading the Task.
#[tokio::test]
async fn a_standalone_task_prompt_carries_its_description_without_reading_the_task() {
    let h = Harness::start().await;
    create_solo_task(&h, "Write goodbye.txt").await;
    h.create("loose", json!([]), json!({})).await;
    let text = prompt_of(&h.wait_for_pod("solo-a1").await);
    assert!(text.contains("Write goodbye.txt"), "{text}");
    assert_eq!(task_reads(&h), 0);
    h.stop().await;
}

/// Creates "solo", waits `before_edit`, edits it to "Write farewell.txt", creates its
/// Feature, and returns the first Pod whose prompt carries the edit.
async fn edit_solo_then_wait_for_the_edited_prompt(h: &Harness, before_edit: Duration) -> Pod {
    create_solo_task(h, "Write goodbye.txt").await;
    tokio::time::sleep(before_edit).await;
    h.tasks()
        .patch(
            "solo",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"description": "Write farewell.txt"}})),
        )
        .await
        .expect("edit the description");
    h.create("loose", json!([]), json!({})).await;
    h.eventually("an attempt carrying the edited description", || async {
        h.agent_pods()
            .await
            .into_iter()
            .find(|pod| prompt_of(pod).contains("Write farewell.txt"))
    })
    .await
}

/// The controller may start an attempt before its Task watch delivers an edit made just
/// before (a real API server's watches lag too): that attempt is superseded, and the one
/// that runs carries the last edit alone.
#[tokio::test]
async fn a_standalone_task_prompt_carries_the_description_it_was_last_edited_to() {
    let h = Harness::start().await;
    let pod = edit_solo_then_wait_for_the_edited_prompt(&h, Duration::ZERO).await;
    assert!(!prompt_of(&pod).contains("goodbye"), "{}", prompt_of(&pod));
    h.stop().await;
}

#[tokio::test]
async fn an_attempt_started_before_the_watch_delivered_an_edit_is_superseded_by_one_with_it() {
    // Long enough for the Feature's reconcile to start the attempt on a loaded machine.
    let lag = Duration::from_secs(1);
    let h = Harness::start_lagging("tasks", lag).await;
    // The watch has delivered the created Task, not yet the edit, when the Feature appears.
    let edited = edit_solo_then_wait_for_the_edited_prompt(&h, lag * 2).await;
    assert_eq!(
        edited.name_any(),
        "solo-a2",
        "the first attempt ran the old text"
    );
    let events = h.events_with_reason("AttemptSuperseded").await;
    assert_eq!(events.len(), 1, "{events:?}");
    h.wait_for_pod_gone("solo-a1").await;
    h.stop().await;
}

#[tokio::test]
async fn crashed_attempt_is_retried_and_the_next_prompt_says_why() {
    let h = Harness::start().await;
    let second = h.crash_first_attempt("crashy").await;
    let text = prompt_of(&second);
    assert_mentions(&text, &["OOMKilled"]);
    let status = h.task_status("crashy-a").await;
    assert_eq!(status.retry_count, 1);
    assert_eq!(status.attempts[0].outcome, Some(AttemptOutcome::Crashed));

    h.finish_done_to_complete(&second, "crashy").await;
    h.stop().await;
}

#[tokio::test]
async fn failed_task_blocks_its_dependents_and_fails_the_feature() {
    let tasks = json!([
        {"name": "a", "maxRetries": 0},
        {"name": "b", "dependsOn": ["a"]}
    ]);
    let h = Harness::with_feature("doomed", tasks, json!({})).await;
    let pod = h.wait_for_pod("doomed-a-a1").await;
    h.finish_attempt(&pod, json!({"taskFailed": "a"})).await;

    let feature = h.wait_for_feature_phase("doomed", "Failed").await;
    let status = feature.status.expect("status");
    assert_eq!(status.counts.failed, 1);
    assert_eq!(status.counts.blocked, 1);
    let b = h.tasks().get("doomed-b").await.expect("task b");
    assert_eq!(b.status.map(|s| s.phase), Some(TaskPhase::Blocked));
    h.stop().await;
}

#[tokio::test]
async fn expired_claim_makes_the_attempt_lost_deletes_its_pod_and_retries() {
    let h = Harness::start().await;
    h.start_one_task_feature("lossy").await;
    h.set_running("lossy-a-a1").await;
    h.expire_claim("lossy-a").await;

    h.wait_for_pod_gone("lossy-a-a1").await;
    let second = h.wait_for_pod("lossy-a-a2").await;
    let status = h.task_status("lossy-a").await;
    assert_eq!(status.attempts[0].outcome, Some(AttemptOutcome::Lost));
    h.finish_done_to_complete(&second, "lossy").await;
    h.stop().await;
}

#[tokio::test]
async fn suspend_cancels_the_running_attempt_and_starts_nothing() {
    let h = Harness::with_feature("paused", a_then_b(), json!({})).await;
    h.wait_for_pod("paused-a-a1").await;
    h.set_running("paused-a-a1").await;

    h.patch_feature_spec("paused", json!({"suspend": true}))
        .await;

    h.wait_for_pod_gone("paused-a-a1").await;
    h.wait_for_feature_phase("paused", "Suspended").await;
    let task = h
        .eventually("attempt to be recorded interrupted", || async {
            let t = h.tasks().get("paused-a").await.ok()?;
            let outcome = t.status.as_ref()?.attempts.first()?.outcome;
            (outcome == Some(AttemptOutcome::Interrupted)).then_some(t)
        })
        .await;
    let status = task.status.expect("status");
    assert_eq!(status.phase, TaskPhase::Pending);
    assert_eq!(status.retry_count, 0);
    assert!(h.agent_pods().await.is_empty());
    h.stop().await;
}

#[tokio::test]
async fn invalid_plan_is_reported_and_nothing_runs() {
    let tasks = json!([
        {"name": "a", "dependsOn": ["b"]},
        {"name": "b", "dependsOn": ["a"]}
    ]);
    let h = Harness::with_feature("loop", tasks, json!({})).await;
    let feature = h.wait_for_feature_phase("loop", "Invalid").await;
    let valid = valid_condition(feature);
    assert_eq!(valid.status, "False");
    assert_mentions(&valid.message, &["loop-a"]);
    assert!(h.agent_pods().await.is_empty());
    h.stop().await;
}

#[tokio::test]
async fn parallelism_limits_concurrent_agent_pods() {
    let tasks = json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]);
    let h = Harness::with_feature("narrow", tasks, json!({"parallelism": 2})).await;
    h.wait_for_pod("narrow-a-a1").await;
    h.wait_for_pod("narrow-b-a1").await;
    // Let the controller settle, then check that the third did not start.
    h.eventually("feature status to count two running", || async {
        let f = h.features().get("narrow").await.ok()?;
        (f.status?.counts.running == 2).then_some(())
    })
    .await;
    assert!(!h.has_pod("narrow-c-a1").await);
    let first = h.pods().get("narrow-a-a1").await.expect("pod");
    h.finish_done(&first).await;
    h.wait_for_pod("narrow-c-a1").await;
    h.stop().await;
}

/// A Feature whose dependents are listed before their blockers.
fn dependents_first() -> serde_json::Value {
    json!([
        {"name": "docs", "dependsOn": ["design", "code"]},
        {"name": "code", "dependsOn": ["design"]},
        {"name": "design"}
    ])
}

/// A harness whose Task watch delivers every event late, one after another.
async fn with_lagging_task_watch() -> Harness {
    Harness::start_lagging("tasks", Duration::from_millis(40)).await
}

fn is_lease_create(r: &fake_apiserver::RequestRecord) -> bool {
    r.resource == "leases" && r.verb == fake_apiserver::Verb::Create && r.status < 400
}

#[tokio::test]
async fn a_lagging_task_watch_never_shows_a_valid_feature_invalid_or_without_plan() {
    let h = with_lagging_task_watch().await;
    let phases = h.record_feature_phases("ordered");
    h.create("ordered", dependents_first(), json!({})).await;
    run_to_completion(&h, "ordered").await;
    let seen = phases.lock().expect("phases").clone();
    assert!(
        !seen.iter().any(|p| p == "Invalid" || p == "NoPlan"),
        "phases seen: {seen:?}"
    );
    assert!(h.events_with_reason("InvalidPlan").await.is_empty());
    h.stop().await;
}

#[tokio::test]
async fn a_lagging_task_watch_claims_nothing_for_an_invalid_feature() {
    let h = with_lagging_task_watch().await;
    // The first Task alone looks like a valid plan.
    let tasks = json!([
        {"name": "c"},
        {"name": "a", "dependsOn": ["b"]},
        {"name": "b", "dependsOn": ["a"]}
    ]);
    h.create("cyclic", tasks, json!({})).await;
    h.wait_for_feature_phase("cyclic", "Invalid").await;
    assert_eq!(h.server.count_requests(is_lease_create), 0);
    assert_eq!(h.events_with_reason("InvalidPlan").await.len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn a_restarted_controller_applies_no_unchanged_task() {
    let mut h = Harness::start().await;
    let tasks: Vec<_> = (0..20).map(|i| json!({"name": format!("t{i}")})).collect();
    h.create(
        "steady",
        serde_json::Value::Array(tasks),
        json!({"parallelism": 1}),
    )
    .await;
    let first = h.wait_for_pod("steady-t0-a1").await;
    // The new controller's Task cache fills after its first Feature reconcile could run.
    h.server.add_latency(
        |r| r.resource == "tasks" && r.verb == fake_apiserver::Verb::List,
        Duration::from_millis(300),
    );
    h.restart_controller().await;
    h.server.clear_requests();
    // The new controller must reconcile the feature to start the next attempt.
    h.finish_done(&first).await;
    h.wait_for_pod("steady-t1-a1").await;
    let task_patches = h.server.count_requests(|r| {
        r.resource == "tasks" && r.verb == fake_apiserver::Verb::Patch && r.subresource.is_none()
    });
    assert_eq!(task_patches, 0);
    h.stop().await;
}

#[tokio::test]
async fn missing_agent_image_is_a_condition_on_feature_and_task_with_one_warning_and_no_claim() {
    let h = Harness::start().await;
    let mut manifest = feature_manifest("imageless", one_task(), json!({}));
    manifest["spec"]["agent"] = json!({"command": ["scripted-agent"]});
    h.create_feature(manifest).await;
    let condition = h
        .wait_for_feature_condition("imageless", "Configured", "MissingAgentImage")
        .await;
    assert_eq!(condition.status, "False");
    assert_mentions(&condition.message, &["spec.agent.image"]);
    h.wait_for_task_condition("imageless-a", "Configured", "MissingAgentImage")
        .await;
    // Another generation is judged the same way, without another Event.
    h.patch_feature_spec("imageless", json!({"parallelism": 2}))
        .await;
    h.eventually("generation 2 observed", || async {
        let f = h.features().get("imageless").await.ok()?;
        (f.status?.observed_generation == Some(2)).then_some(())
    })
    .await;
    assert_eq!(h.events_with_reason("MissingAgentImage").await.len(), 1);
    assert_eq!(h.server.count_requests(is_lease_create), 0);
    h.stop().await;
}

#[tokio::test]
async fn refused_agent_pod_is_a_condition_with_one_warning_and_its_claim_is_released() {
    let h = Harness::start_after(|server| {
        server.fail_next(
            1,
            |r| r.resource == "pods" && r.verb == fake_apiserver::Verb::Create,
            fake_apiserver::ApiError::new(
                403,
                "Forbidden",
                "pods \"refused-a-a1\" is forbidden: error looking up service account \
                 team/ralph-agent: serviceaccount \"ralph-agent\" not found",
            ),
        );
    })
    .await;
    h.create("refused", one_task(), json!({})).await;
    let condition = h
        .wait_for_feature_condition("refused", "Configured", "PodRejected")
        .await;
    assert_mentions(&condition.message, &["ralph-agent"]);
    let task = h
        .wait_for_task_condition("refused-a", "Configured", "PodRejected")
        .await;
    assert_eq!(task.status, "False");
    // A released claim is a Lease without a holder (kept for its fencing token) or none.
    h.eventually("the claim to be released", || async {
        let lease = h.leases().get_opt("refused-a").await.ok()?;
        let holder = lease
            .and_then(|l| l.spec)
            .and_then(|spec| spec.holder_identity)
            .filter(|holder| !holder.is_empty());
        holder.is_none().then_some(())
    })
    .await;
    assert_eq!(h.events_with_reason("PodRejected").await.len(), 1);
    let status = h.tasks().get("refused-a").await.expect("task").status;
    assert_eq!(status.map(|s| s.retry_count), Some(0));
    h.stop().await;
}

#[tokio::test]
async fn a_prompt_too_large_for_the_pods_annotations_travels_in_a_config_map_the_pod_owns() {
    let h = Harness::start_with_pod_ttl(Duration::from_secs(1)).await;
    let spec = "s".repeat(200 * 1024);
    let context = json!({"context": {
        "spec": {"inline": spec},
        "plan": {"inline": "p".repeat(100 * 1024)}
    }});
    h.create("big", one_task(), context).await;
    let pod = h.wait_for_pod("big-a-a1").await;
    assert!(!pod.annotations().contains_key("ralph.dev/prompt"));
    let mounted = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .find(|v| v.name == "prompt")
        .and_then(|v| v.config_map.clone())
        .expect("the prompt volume is a ConfigMap");
    assert_eq!(mounted.name, "big-a-a1-prompt");
    let map = h
        .eventually("the ConfigMap handed to its Pod", || async {
            let map = h.config_maps().get("big-a-a1-prompt").await.ok()?;
            let owners = map.metadata.owner_references.clone().unwrap_or_default();
            (owners
                .iter()
                .any(|o| o.kind == "Pod" && o.name == "big-a-a1"))
            .then_some(map)
        })
        .await;
    let prompt = &map.data.unwrap_or_default()["prompt.md"];
    assert!(prompt.contains(&spec), "the prompt carries the spec");
    assert_mentions(prompt, &["Your task ID is: a"]);
    h.finish_done_to_complete(&pod, "big").await;
    h.eventually("the ConfigMap gone with its Pod", || async {
        let map = h.config_maps().get_opt("big-a-a1-prompt").await.ok()?;
        map.is_none().then_some(())
    })
    .await;
    h.stop().await;
}

#[tokio::test]
async fn a_prompt_too_large_for_a_config_map_is_a_condition_naming_the_fix() {
    let h = Harness::start().await;
    let text = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("big-spec".to_owned()),
            ..Default::default()
        },
        data: Some([("spec.md".to_owned(), "s".repeat(1000 * 1024))].into()),
        ..ConfigMap::default()
    };
    h.config_maps()
        .create(&Default::default(), &text)
        .await
        .expect("a 1000 KiB spec");
    let context = json!({"context": {
        "spec": {"configMapKeyRef": {"name": "big-spec", "key": "spec.md"}},
        "plan": {"inline": "p".repeat(100 * 1024)}
    }});
    h.create("big", one_task(), context).await;
    let task = h
        .wait_for_task_condition("big-a", "Configured", "PromptTooLarge")
        .await;
    assert_eq!(task.status, "False");
    assert_mentions(
        &task.message,
        &[
            "big-a-a1",
            "1024 KiB",
            "spec.context.spec",
            "spec.context.plan",
        ],
    );
    h.wait_for_feature_condition("big", "Configured", "PromptTooLarge")
        .await;
    assert_eq!(h.events_with_reason("PromptTooLarge").await.len(), 1);
    assert!(
        !h.has_pod("big-a-a1").await,
        "no Pod the API server would refuse"
    );
    let status = h.tasks().get("big-a").await.expect("task").status;
    assert_eq!(status.map(|s| s.retry_count), Some(0));
    h.stop().await;
}

#[tokio::test]
async fn task_the_api_server_rejects_makes_the_feature_invalid_naming_the_template() {
    let h = Harness::start_after(|server| {
        server.fail_next(
            100,
            |r| {
                r.resource == "tasks"
                    && r.verb == fake_apiserver::Verb::Patch
                    && r.name.as_deref() == Some("rejecting-b")
            },
            fake_apiserver::ApiError::invalid(
                "tasks.ralph.dev",
                "rejecting-b",
                "Task.ralph.dev \"rejecting-b\" is invalid: spec.title: Too long",
            ),
        );
    })
    .await;
    h.create(
        "rejecting",
        json!([{"name": "a"}, {"name": "b"}]),
        json!({}),
    )
    .await;
    let valid = h
        .wait_for_feature_condition("rejecting", "Valid", "TaskRejected")
        .await;
    assert_mentions(&valid.message, &["spec.tasks[1]"]);
    assert_eq!(h.events_with_reason("TaskRejected").await.len(), 1);
    assert_eq!(h.server.count_requests(is_lease_create), 0);
    h.stop().await;
}

/// The result of attempt 1 of task "a" of Feature `feature` whose agent binary is missing.
fn misconfigured_result(feature: &str) -> String {
    json!({
        "version": 1,
        "task": "a",
        "attempt": format!("{feature}-a-a1"),
        "outcome": "misconfigured",
        "exitCode": 127,
        "misconfiguration": {"problem": "claude-agent-acp: command not found",
                             "fix": "use an image that contains claude-agent-acp"},
        "timings": {"startedAtMs": 0, "endedAtMs": 1}
    })
    .to_string()
}

#[tokio::test]
async fn agent_reporting_misconfiguration_halts_the_feature_until_its_spec_changes() {
    let h = Harness::start().await;
    let pod = h.start_one_task_feature("halting").await;
    h.terminate_agent(
        &pod.name_any(),
        127,
        "Error",
        Some(misconfigured_result("halting")),
    )
    .await;
    let condition = h
        .wait_for_feature_condition("halting", "Configured", "AgentMisconfigured")
        .await;
    assert_mentions(&condition.message, &["command not found"]);
    let status = h.task_status("halting-a").await;
    assert_eq!(status.retry_count, 0);
    assert_eq!(status.phase, TaskPhase::Pending);
    assert!(!h.has_pod("halting-a-a2").await);
    let fixed = json!({"agent": {"image": "agent:fixed"}});
    h.patch_feature_spec("halting", fixed).await;
    h.wait_for_pod("halting-a-a2").await;
    h.stop().await;
}

#[tokio::test]
async fn a_feature_cache_behind_an_agents_misconfiguration_starts_no_new_pod() {
    let h = Harness::start_lagging("features", Duration::from_millis(1500)).await;
    let pod = h.start_one_task_feature("lagging").await;
    h.terminate_agent(
        &pod.name_any(),
        127,
        "Error",
        Some(misconfigured_result("lagging")),
    )
    .await;
    h.wait_for_task_condition("lagging-a", "Configured", "AgentMisconfigured")
        .await;
    // Reconciles triggered meanwhile read a Feature without the halt; the Task shows it.
    tokio::time::sleep(Duration::from_secs(6)).await;

    assert!(!h.has_pod("lagging-a-a2").await);
    let status = h.task_status("lagging-a").await;
    assert_eq!(
        status.attempts[0].outcome,
        Some(AttemptOutcome::Misconfigured)
    );
    assert_eq!(status.retry_count, 0);
    h.stop().await;
}

#[tokio::test]
async fn a_verification_agent_without_a_git_workspace_is_a_condition_and_nothing_starts() {
    let h = Harness::with_feature("verified", one_task(), json!({"verify": {"agent": true}})).await;
    let condition = h
        .wait_for_feature_condition("verified", "Configured", "VerifyNeedsWorkspace")
        .await;
    assert_mentions(
        &condition.message,
        &["spec.verify.agent", "spec.workspace.git"],
    );
    assert_eq!(h.events_with_reason("VerifyNeedsWorkspace").await.len(), 1);
    assert_eq!(h.server.count_requests(is_lease_create), 0);
    h.stop().await;
}

#[tokio::test]
async fn a_claim_that_expired_after_its_pod_reported_done_is_ingested_not_lost() {
    // The controller sees Pod changes late: the claim's expiry reaches it first.
    let h = Harness::start_lagging("pods", Duration::from_millis(1500)).await;
    let pod = h.start_one_task_feature("late").await;
    h.eventually("the attempt to be recorded", || async {
        let t = h.tasks().get("late-a").await.ok()?;
        (t.status?.phase == TaskPhase::Running).then_some(())
    })
    .await;
    h.finish_done(&pod).await;
    h.expire_claim("late-a").await;
    h.wait_for_feature_phase("late", "Complete").await;
    let status = h.task_status("late-a").await;
    assert_eq!(status.attempts[0].outcome, Some(AttemptOutcome::Done));
    assert_eq!(status.attempt_count, 1);
    h.stop().await;
}

#[tokio::test]
async fn a_feature_deleted_while_running_gives_its_attempt_slot_back() {
    let h = Harness::start_with(1).await;
    h.start_one_task_feature("first").await;
    h.create("second", one_task(), json!({})).await;
    h.features()
        .delete("first", &Default::default())
        .await
        .expect("delete feature");
    h.wait_for_pod("second-a-a1").await;
    h.stop().await;
}

#[tokio::test]
async fn a_lagging_task_cache_earns_no_conflicts_the_controller_decides_from_its_own_writes() {
    // The Task cache stays seconds behind the controller's own status writes.
    let h = Harness::start_lagging("tasks", Duration::from_millis(2000)).await;
    let pod = h.start_one_task_feature("stale").await;
    h.finish_done_to_complete(&pod, "stale").await;
    let conflicts = h.server.count_requests(|r| {
        r.resource == "tasks" && r.subresource.as_deref() == Some("status") && r.status == 409
    });
    assert_eq!(conflicts, 0);
    h.stop().await;
}

#[tokio::test]
async fn a_lagging_task_watch_never_shows_a_feature_of_standalone_tasks_without_plan() {
    let h = Harness::start_lagging("tasks", Duration::from_millis(300)).await;
    // The controller's caches are filled: the Task below reaches it only by the watch.
    h.create("warmup", json!([]), json!({})).await;
    h.wait_for_feature_phase("warmup", "NoPlan").await;
    h.create_task(
        "loose",
        json!({"featureRef": "standalone", "title": "A task of its own"}),
    )
    .await;
    let phases = h.record_feature_phases("standalone");
    h.create("standalone", json!([]), json!({})).await;
    let pod = h.wait_for_pod("loose-a1").await;
    h.finish_done_to_complete(&pod, "standalone").await;
    let seen = phases.lock().expect("phases").clone();
    assert!(!seen.iter().any(|p| p == "NoPlan"), "phases seen: {seen:?}");
    h.stop().await;
}

/// The Feature's `Valid` condition.
fn valid_condition(feature: Feature) -> Condition {
    let status = feature.status.expect("status");
    status
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Valid")
        .expect("Valid condition")
}
