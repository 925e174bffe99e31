//! What the controller's caches keep of each object: only what a reconcile reads from
//! them. The watch streams trim every object before the store holds it, so 10,000 Tasks and
//! their finished agent Pods fit in a small controller. A field dropped here is read by no
//! reconcile from the cache (a live read fetches what a rare step needs).

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, Pod,
    PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use kube::ResourceExt;

use crate::api::{Feature, Task, desired_tasks};
use crate::controller::plan::origin::template_hash;
use crate::engine::lifecycle::attempt_number_of;

/// `kubectl apply`'s copy of the applied object: nothing the controller reads.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Objects per page of a list the controller reads (its watches' first lists included).
pub const LIST_PAGE: u32 = 500;

/// Features per page of the Feature watch's lists: a Feature with its prompt texts is up
/// to 1.5 MiB, held whole until it is trimmed.
pub const FEATURE_LIST_PAGE: u32 = 10;

/// What no cached object keeps: managedFields (they name every field of the object) and
/// kubectl's last-applied copy.
pub fn trim_metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// A Task as cached: of its labels, annotations and owner references only where it came
/// from (its Feature, template and template hash), packed into one cache-only string
/// ([`super::origin`]: the maps cost 870 bytes a Task, 8.5 MiB over 10,000); no
/// finalizers, and no description (the prompt text, up to 32 KiB, needed only when an
/// attempt starts: [`descriptions`] finds it); the rest of the spec and the whole
/// status (a status write carries the whole status it was decided from).
pub fn trim_task(task: &mut Task) {
    let meta = &mut task.metadata;
    trim_metadata(meta);
    meta.self_link = None;
    crate::controller::plan::origin::pack(meta);
    meta.finalizers = None;
    task.spec.fields.description = String::new();
}

/// Cache-only annotation of a trimmed Feature: the hash of what is applied for each of its
/// templates ([`crate::controller::plan::origin::template_hash`], computed from the whole template before its
/// text was dropped), comma-separated in template order. Never written to the API server.
pub const TEMPLATE_HASHES_ANNOTATION: &str = "ralph.dev/cached-template-hashes";

/// A Feature as cached: its metadata trimmed ([`trim_metadata`]), and its templates without
/// their descriptions (the prompt texts, 1 KiB each is 10 MiB over 10,000 templates). What
/// a reconcile needs of the texts is kept instead: each template's applied hash
/// ([`TEMPLATE_HASHES_ANNOTATION`], read by [`template_hashes`]). The texts are read on
/// demand ([`super::spec_cache`]): to apply a changed Task and to start an attempt. A
/// Feature without prompt texts is kept whole ([`is_whole`]: nothing to read on demand).
/// `cached` is the cache's version of the Feature, if any: when it is of the same uid and
/// generation (the spec has not changed, e.g. a status write), its hashes are taken over
/// instead of hashing every template again.
pub fn trim_feature(feature: &mut Feature, cached: Option<&Feature>) {
    trim_metadata(&mut feature.metadata);
    let meta = &feature.metadata;
    let unchanged = cached
        .filter(|_| meta.generation.is_some() && meta.uid.is_some())
        .filter(|c| c.metadata.uid == meta.uid && c.metadata.generation == meta.generation)
        .and_then(|c| c.annotations().get(TEMPLATE_HASHES_ANNOTATION).cloned());
    feature.annotations_mut().remove(TEMPLATE_HASHES_ANNOTATION);
    if feature
        .spec
        .tasks
        .iter()
        .all(|t| t.fields.description.is_empty())
    {
        return;
    }
    let hashes = match unchanged {
        Some(hashes) => hashes,
        // A watched object always has a uid; without one no Task can be applied from it.
        None => match desired_tasks(feature) {
            Ok(desired) => desired
                .iter()
                .map(template_hash)
                .collect::<Vec<_>>()
                .join(","),
            Err(_) => return,
        },
    };
    feature
        .annotations_mut()
        .insert(TEMPLATE_HASHES_ANNOTATION.to_owned(), hashes);
    for template in &mut feature.spec.tasks {
        template.fields.description = String::new();
    }
}

/// True when `feature` holds its templates' texts: it was not trimmed, or had none to drop.
pub fn is_whole(feature: &Feature) -> bool {
    !feature
        .annotations()
        .contains_key(TEMPLATE_HASHES_ANNOTATION)
}

/// The applied hash of each of `feature`'s templates, in template order: those recorded
/// when it was trimmed, or computed from its templates when it was not (a Feature read
/// live).
pub fn template_hashes(feature: &Feature) -> Vec<String> {
    let recorded = feature
        .annotations()
        .get(TEMPLATE_HASHES_ANNOTATION)
        .map(|joined| joined.split(',').map(str::to_owned).collect::<Vec<_>>())
        .filter(|hashes| hashes.len() == feature.spec.tasks.len());
    match recorded {
        Some(hashes) => hashes,
        None if feature.spec.tasks.is_empty() => Vec::new(),
        None => desired_tasks(feature)
            .map(|tasks| tasks.iter().map(template_hash).collect())
            .unwrap_or_default(),
    }
}

/// An agent Pod as cached: no annotations (the prompt is one), its labels, owner, deletion
/// and creation times, and of its status the phase, reason, message, start time and each
/// container's name and how it runs or ended (the runner's result is the agent container's
/// termination message); of a waiting container only a start problem (the kubelet's reason,
/// its message bounded, and the image: [`super::pod_start`]); of its conditions only the
/// scheduler's `PodScheduled=False` (a Pod that waits for a node). No spec, no prompt
/// annotation, no other conditions, addresses or container ids: the lifecycle, the git
/// steps and the retention sweep read none of them.
pub fn trim_pod(pod: &mut Pod) {
    trim_metadata(&mut pod.metadata);
    pod.spec = None;
    pod.metadata.annotations = None;
    pod.metadata.finalizers = None;
    pod.status = pod.status.take().map(|status| PodStatus {
        phase: status.phase,
        reason: status.reason,
        message: status.message,
        start_time: status.start_time,
        conditions: status.conditions.and_then(unschedulable_only),
        container_statuses: status.container_statuses.map(trim_containers),
        init_container_statuses: status.init_container_statuses.map(trim_containers),
        ..PodStatus::default()
    });
}

/// True when `task`'s status has recorded the conclusion of the attempt `pod` ran: a record
/// of that Pod with an outcome, or a later attempt started (one starts only after the last
/// one's end is recorded). Nothing reads such a Pod from the cache any more once it has
/// ended ([`super::retention`] keeps it out). A Pod whose result the Task has not recorded
/// yet (e.g. one that finished while the controller was down) is not.
pub fn is_recorded(pod: &Pod, task: &Task) -> bool {
    let (Some(name), Some(status)) = (pod.metadata.name.as_deref(), task.status.as_ref()) else {
        return false;
    };
    let number = attempt_number_of(task.metadata.name.as_deref().unwrap_or_default(), name);
    let later_started = number.is_some_and(|n| n < status.attempt_count);
    later_started
        || status
            .attempts
            .iter()
            .any(|r| r.pod.as_deref() == Some(name) && r.outcome.is_some())
}

/// Of a Pod's conditions only `PodScheduled=False` (the scheduler's word on a Pod that waits
/// for a node, its message bounded): the Task shows it while the attempt waits.
fn unschedulable_only(conditions: Vec<PodCondition>) -> Option<Vec<PodCondition>> {
    let kept: Vec<PodCondition> = conditions
        .into_iter()
        .filter(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| PodCondition {
            type_: c.type_,
            status: c.status,
            reason: c.reason,
            message: c
                .message
                .map(|m| crate::engine::policy::cut_chars(m.trim(), MAX_SCHEDULER_MESSAGE_CHARS)),
            ..PodCondition::default()
        })
        .collect();
    (!kept.is_empty()).then_some(kept)
}

/// The longest scheduler message a cached Pod keeps.
const MAX_SCHEDULER_MESSAGE_CHARS: usize = 240;

fn trim_containers(statuses: Vec<ContainerStatus>) -> Vec<ContainerStatus> {
    statuses
        .into_iter()
        .map(|status| {
            let start_problem = crate::controller::plan::pod_start::trimmed_waiting(&status);
            let (waiting, image) = match start_problem {
                Some((waiting, image)) => (Some(waiting), image),
                None => (None, String::new()),
            };
            ContainerStatus {
                name: status.name,
                image,
                state: status.state.map(|state| ContainerState {
                    running: state.running.map(|running| ContainerStateRunning {
                        started_at: running.started_at,
                    }),
                    terminated: state.terminated.map(|ended| ContainerStateTerminated {
                        container_id: None,
                        ..ended
                    }),
                    waiting,
                }),
                ..ContainerStatus::default()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::{TaskFields, TaskSpec};
    use crate::controller::plan::origin::{self, Origin};
    use k8s_openapi::api::core::v1::ContainerStateWaiting;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        ManagedFieldsEntry, OwnerReference, Time,
    };

    fn map(entries: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    fn pod_from(json: serde_json::Value) -> Pod {
        match serde_json::from_value(json) {
            Ok(pod) => pod,
            Err(error) => panic!("test pod does not parse: {error}"),
        }
    }

    fn finished_pod() -> Pod {
        pod_from(serde_json::json!({
            "metadata": {
                "name": "t-a1", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "creationTimestamp": "2026-11-23T10:00:00Z",
                "deletionTimestamp": "2026-11-23T11:00:00Z",
                "labels": {"ralph.dev/feature": "f", "ralph.dev/attempt": "t-a1", "team": "x"},
                "annotations": {"ralph.dev/prompt": "a long prompt", "note": "n"},
                "ownerReferences": [{"apiVersion": "ralph.dev/v1alpha1", "kind": "Task",
                    "name": "t", "uid": "tu"}],
                "finalizers": ["example.com/keep"],
                "managedFields": [{"manager": "kubelet"}]
            },
            "spec": {"containers": [{"name": "agent", "image": "agent:1"}]},
            "status": {
                "phase": "Failed", "reason": "Evicted", "message": "node pressure",
                "startTime": "2026-11-23T10:00:01Z",
                "conditions": [{"type": "Ready", "status": "False"}],
                "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "podIPs": [{"ip": "10.1.0.1"}],
                "qosClass": "BestEffort",
                "initContainerStatuses": [{
                    "name": "prepare", "image": "ralph:1", "imageID": "sha", "ready": false,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "message": "{\"outcome\":\"prepared\"}"}}
                }],
                "containerStatuses": [{
                    "name": "agent", "image": "agent:1", "imageID": "sha256:abc",
                    "containerID": "containerd://1", "ready": true, "restartCount": 2,
                    "lastState": {"terminated": {"exitCode": 1}},
                    "state": {"terminated": {"exitCode": 3, "signal": 9, "reason": "Error",
                        "message": "{\"version\":1}", "containerID": "containerd://1",
                        "startedAt": "2026-11-23T10:00:02Z",
                        "finishedAt": "2026-11-23T10:05:00Z"}}
                }, {
                    "name": "sidecar", "image": "ralph:1", "imageID": "sha", "ready": true,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-11-23T10:00:02Z"},
                        "waiting": {"reason": "CrashLoopBackOff"}}
                }]
            }
        }))
    }

    #[test]
    fn a_cached_pod_keeps_its_identity_labels_owner_and_times() {
        let mut pod = finished_pod();
        trim_pod(&mut pod);
        let meta = &pod.metadata;
        assert_eq!(meta.name.as_deref(), Some("t-a1"));
        assert_eq!(meta.namespace.as_deref(), Some("ns"));
        assert_eq!(meta.resource_version.as_deref(), Some("7"));
        assert_eq!(
            meta.labels,
            map(&[
                ("ralph.dev/feature", "f"),
                ("ralph.dev/attempt", "t-a1"),
                ("team", "x")
            ])
        );
        assert_eq!(meta.owner_references.as_ref().map(Vec::len), Some(1));
        assert!(meta.creation_timestamp.is_some());
        assert!(meta.deletion_timestamp.is_some());
    }

    #[test]
    fn a_cached_pod_has_no_spec_annotations_finalizers_or_managed_fields() {
        let mut pod = finished_pod();
        trim_pod(&mut pod);
        assert!(pod.spec.is_none());
        assert!(pod.metadata.annotations.is_none());
        assert!(pod.metadata.finalizers.is_none());
        assert!(pod.metadata.managed_fields.is_none());
    }

    #[test]
    fn a_cached_pod_keeps_how_each_container_ran_and_ended() {
        let original = finished_pod();
        let mut pod = original.clone();
        trim_pod(&mut pod);
        let status = pod.status.clone().unwrap_or_default();
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert_eq!(status.reason.as_deref(), Some("Evicted"));
        assert_eq!(status.message.as_deref(), Some("node pressure"));
        assert!(status.start_time.is_some());
        let containers = status.container_statuses.unwrap_or_default();
        let agent = containers[0]
            .state
            .as_ref()
            .and_then(|s| s.terminated.clone());
        let before = original
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default()[0]
            .state
            .as_ref()
            .and_then(|s| s.terminated.clone());
        assert_eq!(
            agent,
            before.map(|t| ContainerStateTerminated {
                container_id: None,
                ..t
            })
        );
        let sidecar = containers[1].state.as_ref();
        assert_eq!(
            sidecar
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.clone()),
            Some(Time("2026-11-23T10:00:02Z".parse().unwrap_or_default()))
        );
        let init = status.init_container_statuses.unwrap_or_default();
        assert_eq!(init[0].name, "prepare");
        assert_eq!(
            init[0]
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .and_then(|t| t.message.as_deref()),
            Some("{\"outcome\":\"prepared\"}")
        );
    }

    #[test]
    fn a_cached_pod_keeps_the_schedulers_word_while_no_node_takes_it() {
        let mut pod = pod_from(serde_json::json!({
            "metadata": {"name": "t-a1", "namespace": "ns"},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/1 nodes are available: 1 Too many pods."},
                {"type": "Ready", "status": "False"},
            ]},
        }));
        trim_pod(&mut pod);
        let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
        assert_eq!(conditions.len(), 1);
        assert_eq!(
            conditions[0].message.as_deref(),
            Some("0/1 nodes are available: 1 Too many pods.")
        );
    }

    #[test]
    fn a_cached_pod_has_no_conditions_addresses_images_or_ordinary_waiting_states() {
        let mut pod = finished_pod();
        trim_pod(&mut pod);
        let status = pod.status.unwrap_or_default();
        assert!(status.conditions.is_none());
        assert!(status.host_ip.is_none() && status.pod_ip.is_none());
        assert!(status.pod_ips.is_none() && status.qos_class.is_none());
        for container in status.container_statuses.unwrap_or_default() {
            assert!(container.image.is_empty() && container.image_id.is_empty());
            assert!(container.container_id.is_none() && container.last_state.is_none());
            assert!(container.state.is_some_and(|s| s.waiting.is_none()));
        }
    }

    fn pod_waiting_for(reason: &str, message: &str) -> Pod {
        pod_from(serde_json::json!({
            "metadata": {"name": "t-a1", "namespace": "ns"},
            "status": {
                "phase": "Pending",
                "containerStatuses": [{
                    "name": "agent", "image": "registry.invalid/agent:1", "imageID": "",
                    "ready": false, "restartCount": 0,
                    "state": {"waiting": {"reason": reason, "message": message}}
                }]
            }
        }))
    }

    fn first_waiting(pod: &Pod) -> Option<(String, ContainerStateWaiting)> {
        let containers = pod.status.as_ref()?.container_statuses.as_ref()?;
        let container = containers.first()?;
        let waiting = container.state.as_ref()?.waiting.clone()?;
        Some((container.image.clone(), waiting))
    }

    #[test]
    fn a_cached_pod_keeps_the_reason_message_and_image_of_a_container_that_cannot_start() {
        let mut pod = pod_waiting_for("ErrImagePull", "pull access denied");
        trim_pod(&mut pod);
        let (image, waiting) = first_waiting(&pod).unwrap_or_default();
        assert_eq!(image, "registry.invalid/agent:1");
        assert_eq!(waiting.reason.as_deref(), Some("ErrImagePull"));
        assert_eq!(waiting.message.as_deref(), Some("pull access denied"));
    }

    #[test]
    fn a_cached_pod_bounds_the_kubelets_message() {
        let mut pod = pod_waiting_for("ErrImagePull", &"x".repeat(10_000));
        trim_pod(&mut pod);
        let (_, waiting) = first_waiting(&pod).unwrap_or_default();
        let kept = waiting.message.unwrap_or_default();
        assert!(kept.len() < 1_000, "kept {} bytes", kept.len());
    }

    #[test]
    fn a_cached_pod_drops_an_ordinary_waiting_state_and_its_image() {
        let mut pod = pod_waiting_for("ContainerCreating", "");
        trim_pod(&mut pod);
        assert_eq!(first_waiting(&pod), None);
        let containers = pod.status.and_then(|s| s.container_statuses);
        assert!(containers.unwrap_or_default()[0].image.is_empty());
    }

    fn task_with_status(status: serde_json::Value) -> Task {
        match serde_json::from_value(serde_json::json!({
            "apiVersion": "ralph.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "t", "namespace": "ns"},
            "spec": {"featureRef": "f"},
            "status": status
        })) {
            Ok(task) => task,
            Err(error) => panic!("test task does not parse: {error}"),
        }
    }

    fn pod_named(name: &str) -> Pod {
        let mut pod = finished_pod();
        pod.metadata.name = Some(name.to_owned());
        pod
    }

    #[test]
    fn an_attempt_whose_outcome_the_task_records_is_recorded() {
        let task = task_with_status(serde_json::json!({"phase": "Done", "attemptCount": 1,
            "attempts": [{"number": 1, "pod": "t-a1", "outcome": "done"}]}));
        assert!(is_recorded(&pod_named("t-a1"), &task));
    }

    #[test]
    fn an_attempt_the_task_still_runs_is_not_recorded() {
        let task = task_with_status(serde_json::json!({"phase": "Running", "attemptCount": 1,
            "claim": {"lease": "t", "holder": "t-a1", "attempt": 1},
            "attempts": [{"number": 1, "pod": "t-a1"}]}));
        assert!(!is_recorded(&pod_named("t-a1"), &task));
    }

    #[test]
    fn an_attempt_the_task_has_not_started_in_its_status_yet_is_not_recorded() {
        let task = task_with_status(serde_json::json!({"phase": "Pending"}));
        assert!(!is_recorded(&pod_named("t-a1"), &task));
    }

    #[test]
    fn an_attempt_followed_by_a_later_one_is_recorded_when_its_record_is_gone() {
        let task = task_with_status(serde_json::json!({"phase": "Running", "attemptCount": 12,
            "attempts": [{"number": 12, "pod": "t-a12"}]}));
        assert!(is_recorded(&pod_named("t-a3"), &task));
        assert!(!is_recorded(&pod_named("t-a12"), &task));
    }

    #[test]
    fn a_pod_of_another_task_is_not_recorded_by_its_number() {
        let task = task_with_status(serde_json::json!({"phase": "Running", "attemptCount": 5}));
        assert!(!is_recorded(&pod_named("other-a1"), &task));
        assert!(!is_recorded(&pod_named("t-b-a1"), &task));
    }

    fn task() -> Task {
        let mut task = Task::new(
            "f-a",
            TaskSpec {
                feature_ref: "f".to_owned(),
                fields: TaskFields {
                    title: "A".to_owned(),
                    description: "do a".to_owned(),
                    depends_on: vec!["f-b".to_owned()],
                    ..TaskFields::default()
                },
            },
        );
        task.metadata = ObjectMeta {
            name: Some("f-a".to_owned()),
            namespace: Some("ns".to_owned()),
            uid: Some("u".to_owned()),
            resource_version: Some("9".to_owned()),
            generation: Some(2),
            labels: map(&[
                ("ralph.dev/feature", "f"),
                ("ralph.dev/task", "a"),
                ("app.kubernetes.io/instance", "demo"),
            ]),
            annotations: map(&[
                ("ralph.dev/template-hash", "abc"),
                (LAST_APPLIED_ANNOTATION, "{}"),
                (
                    "argocd.argoproj.io/tracking-id",
                    "demo:ralph.dev/Task:ns/f-a",
                ),
            ]),
            owner_references: Some(vec![OwnerReference {
                api_version: "ralph.dev/v1alpha1".to_owned(),
                kind: "Feature".to_owned(),
                name: "f".to_owned(),
                uid: "fu".to_owned(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            finalizers: Some(vec!["example.com/keep".to_owned()]),
            managed_fields: Some(vec![ManagedFieldsEntry::default()]),
            ..ObjectMeta::default()
        };
        task.status = Some(crate::api::TaskStatus {
            attempt_count: 1,
            ..Default::default()
        });
        task
    }

    #[test]
    fn a_cached_task_keeps_no_label_annotation_owner_finalizer_or_managed_fields() {
        let mut task = task();
        trim_task(&mut task);
        assert!(task.metadata.labels.is_none());
        assert!(task.metadata.annotations.is_none());
        assert!(task.metadata.owner_references.is_none());
        assert!(task.metadata.finalizers.is_none());
        assert!(task.metadata.managed_fields.is_none());
    }

    #[test]
    fn a_cached_and_a_live_task_tell_the_same_origin() {
        let live = task();
        let mut cached = task();
        trim_task(&mut cached);
        let expected = Origin {
            feature_uid: Some("fu"),
            template: Some("a"),
            template_hash: Some("abc"),
            plan: None,
        };
        assert_eq!(origin::of(&live), expected);
        assert_eq!(origin::of(&cached), expected);
    }

    #[test]
    fn a_standalone_task_has_no_origin_cached_or_live() {
        let mut standalone = task();
        standalone.metadata.annotations = None;
        standalone.metadata.labels = None;
        standalone.metadata.owner_references = None;
        assert_eq!(origin::of(&standalone), Origin::default());
        trim_task(&mut standalone);
        assert!(standalone.metadata.self_link.is_none());
        assert_eq!(origin::of(&standalone), Origin::default());
    }

    #[test]
    fn a_cached_task_has_no_description() {
        let mut task = task();
        trim_task(&mut task);
        assert!(task.spec.fields.description.is_empty());
    }

    #[test]
    fn a_cached_task_keeps_its_identity_the_rest_of_its_spec_and_its_status() {
        let original = task();
        let mut task = original.clone();
        trim_task(&mut task);
        assert_eq!(task.spec.feature_ref, original.spec.feature_ref);
        assert_eq!(
            TaskFields {
                description: String::new(),
                ..original.spec.fields.clone()
            },
            task.spec.fields
        );
        assert_eq!(task.status, original.status);
        let (meta, before) = (&task.metadata, &original.metadata);
        assert_eq!(meta.name, before.name);
        assert_eq!(meta.namespace, before.namespace);
        assert_eq!(meta.uid, before.uid);
        assert_eq!(meta.resource_version, before.resource_version);
        assert_eq!(meta.generation, before.generation);
    }

    fn feature_with(description: &str) -> Feature {
        match serde_json::from_value(serde_json::json!({
            "apiVersion": "ralph.dev/v1alpha1", "kind": "Feature",
            "metadata": {"name": "f", "namespace": "ns", "uid": "fu", "generation": 2,
                "annotations": {(LAST_APPLIED_ANNOTATION): "{}", "team": "x"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"agent": {"command": ["agent"]}, "tasks": [
                {"name": "a", "title": "A", "description": description, "priority": 3},
                {"name": "b", "title": "B", "description": "do b", "dependsOn": ["a"]}
            ]}
        })) {
            Ok(feature) => feature,
            Err(error) => panic!("test feature does not parse: {error}"),
        }
    }

    fn trimmed(feature: &Feature) -> Feature {
        let mut trimmed = feature.clone();
        trim_feature(&mut trimmed, None);
        trimmed
    }

    #[test]
    fn a_cached_feature_loses_managed_fields_and_the_last_applied_copy() {
        let feature = trimmed(&feature_with("do a"));
        assert!(feature.metadata.managed_fields.is_none());
        let annotations = feature.metadata.annotations.unwrap_or_default();
        assert!(!annotations.contains_key(LAST_APPLIED_ANNOTATION));
        assert_eq!(annotations.get("team").map(String::as_str), Some("x"));
    }

    #[test]
    fn a_cached_feature_keeps_its_templates_without_their_descriptions() {
        let original = feature_with("do a");
        let feature = trimmed(&original);
        let mut expected = original.spec.clone();
        for template in &mut expected.tasks {
            template.fields.description = String::new();
        }
        assert_eq!(feature.spec, expected);
        assert_eq!(feature.metadata.generation, original.metadata.generation);
        assert_eq!(feature.metadata.uid, original.metadata.uid);
    }

    #[test]
    fn a_cached_feature_keeps_the_hash_of_each_whole_template_as_applied() {
        let original = feature_with("do a");
        let applied: Vec<String> = match desired_tasks(&original) {
            Ok(tasks) => tasks.iter().map(template_hash).collect(),
            Err(error) => panic!("desired tasks: {error}"),
        };
        assert_eq!(template_hashes(&trimmed(&original)), applied);
        assert_eq!(template_hashes(&original), applied);
    }

    #[test]
    fn a_template_hash_changes_with_its_description_only() {
        let before = template_hashes(&trimmed(&feature_with("do a")));
        let after = template_hashes(&trimmed(&feature_with("do a, and test it")));
        assert_ne!(before[0], after[0]);
        assert_eq!(before[1], after[1]);
    }

    #[test]
    fn template_hashes_on_the_object_read_from_the_api_server_are_not_trusted() {
        let mut feature = feature_with("do a");
        feature.metadata.uid = None;
        feature
            .annotations_mut()
            .insert(TEMPLATE_HASHES_ANNOTATION.to_owned(), "x,y".to_owned());
        assert!(template_hashes(&trimmed(&feature)).is_empty());
    }

    #[test]
    fn a_feature_without_prompt_texts_is_cached_whole() {
        let mut original = feature_with("");
        original.spec.tasks[1].fields.description = String::new();
        let feature = trimmed(&original);
        assert!(is_whole(&feature));
        assert_eq!(feature.spec, original.spec);
    }

    #[test]
    fn a_feature_with_prompt_texts_is_not_cached_whole() {
        assert!(is_whole(&feature_with("do a")));
        assert!(!is_whole(&trimmed(&feature_with("do a"))));
    }

    #[test]
    fn a_feature_of_the_cached_generation_takes_over_the_cached_hashes() {
        let cached = trimmed(&feature_with("do a"));
        // Same uid and generation: the spec is the cached one's, so nothing is hashed
        // again (the text differs here only to tell the two apart), and hashes the object
        // itself carries are not taken.
        let mut update = feature_with("a text changed without a new generation");
        update
            .annotations_mut()
            .insert(TEMPLATE_HASHES_ANNOTATION.to_owned(), "x,y".to_owned());
        trim_feature(&mut update, Some(&cached));
        assert_eq!(template_hashes(&update), template_hashes(&cached));
    }

    #[test]
    fn a_feature_of_a_new_generation_is_hashed_again() {
        let cached = trimmed(&feature_with("do a"));
        let mut update = feature_with("do a, and test it");
        update.metadata.generation = Some(3);
        trim_feature(&mut update, Some(&cached));
        assert_eq!(
            template_hashes(&update),
            template_hashes(&trimmed(&feature_with("do a, and test it")))
        );
        assert_ne!(template_hashes(&update), template_hashes(&cached));
    }
}
