//! An agent Pod as the cache keeps it, and whether its Task has recorded its attempt (then
//! nothing reads it from the cache any more).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, Pod,
    PodCondition, PodStatus,
};

use super::trim_metadata;
use crate::controller::plan::budget_share::BUDGET_SHARE_ANNOTATION;
use crate::controller::plan::cached::{CachedPod, CachedPodMeta, CachedTask};
use crate::engine::lifecycle::attempt_number_of;

/// An agent Pod as cached: of its annotations only its gateway's budget share (the share
/// the running attempt holds, which the next attempts' shares leave out; the prompt is an
/// annotation too, and dropped), its labels, owner, deletion
/// and creation times, and of its status the phase, reason, message, start time and each
/// container's name and how it runs or ended (the runner's result is the agent container's
/// termination message); of a waiting container only a start problem (the kubelet's reason,
/// its message bounded, and the image: [`crate::controller::plan::pod_start`]); of its
/// conditions only the scheduler's `PodScheduled=False` (a Pod that waits for a node). No
/// spec, no prompt annotation, no other conditions, addresses or container ids: the
/// lifecycle, the git steps and the retention sweep read none of them.
pub fn trim_pod(pod: &mut Pod) {
    trim_metadata(&mut pod.metadata);
    pod.spec = None;
    pod.metadata.annotations = pod.metadata.annotations.take().and_then(budget_share_only);
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

impl From<Pod> for CachedPod {
    /// The Pod as cached: [`trim_pod`], then only the kept fields.
    fn from(mut pod: Pod) -> Self {
        trim_pod(&mut pod);
        let meta = pod.metadata;
        CachedPod {
            metadata: CachedPodMeta {
                name: meta.name,
                namespace: meta.namespace,
                uid: meta.uid,
                resource_version: meta.resource_version,
                creation_timestamp: meta.creation_timestamp,
                deletion_timestamp: meta.deletion_timestamp,
                labels: meta.labels,
                owner_references: meta.owner_references,
            },
            budget_share: meta
                .annotations
                .and_then(|mut a| a.remove(BUDGET_SHARE_ANNOTATION)),
            status: pod.status,
        }
    }
}

/// True when `task`'s status has recorded the conclusion of the attempt `pod` ran: a record
/// of that Pod with an outcome, or a later attempt started (one starts only after the last
/// one's end is recorded). Nothing reads such a Pod from the cache any more once it has
/// ended ([`crate::controller::cache::retention`] keeps it out). A Pod whose result the
/// Task has not recorded yet (e.g. one that finished while the controller was down) is not.
pub fn is_recorded(pod: &CachedPod, task: &CachedTask) -> bool {
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

/// Of a Pod's annotations only its gateway's budget share (`None` without one).
fn budget_share_only(
    mut annotations: BTreeMap<String, String>,
) -> Option<BTreeMap<String, String>> {
    let share = annotations.remove(BUDGET_SHARE_ANNOTATION)?;
    Some(BTreeMap::from([(
        BUDGET_SHARE_ANNOTATION.to_owned(),
        share,
    )]))
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
    use k8s_openapi::api::core::v1::ContainerStateWaiting;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::super::string_map as map;
    use super::*;
    use crate::api::Task;

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
    fn a_cached_pod_keeps_its_gateways_budget_share_and_no_other_annotation() {
        let mut pod = finished_pod();
        let share = r#"{"tokens":1000}"#;
        pod.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(BUDGET_SHARE_ANNOTATION.to_owned(), share.to_owned());
        trim_pod(&mut pod);
        assert_eq!(
            pod.metadata.annotations,
            map(&[(BUDGET_SHARE_ANNOTATION, share)])
        );
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

    fn task_with_status(status: serde_json::Value) -> CachedTask {
        match serde_json::from_value::<Task>(serde_json::json!({
            "apiVersion": "ralph.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "t", "namespace": "ns"},
            "spec": {"featureRef": "f"},
            "status": status
        })) {
            Ok(task) => task.into(),
            Err(error) => panic!("test task does not parse: {error}"),
        }
    }

    fn pod_named(name: &str) -> CachedPod {
        let mut pod = finished_pod();
        pod.metadata.name = Some(name.to_owned());
        pod.into()
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
}
