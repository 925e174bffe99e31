//! Every label and annotation key ralph puts on objects, defined once. Each key means one
//! thing on every kind that carries it.

/// Label on Tasks, agent Pods and claim Leases: the Feature's name.
pub const FEATURE_LABEL: &str = "ralph.dev/feature";
/// Label on Tasks, agent Pods and claim Leases: the task's name within its Feature (the
/// template's name, the id agents report sigils for).
pub const TASK_LABEL: &str = "ralph.dev/task";
/// Label on agent Pods and claim Leases: the Task object's name (`<feature>-<task>`).
pub const TASK_OBJECT_LABEL: &str = "ralph.dev/task-object";
/// Label on agent Pods: the attempt id (`<task object>-a<N>`), also the Pod's name and the
/// claim Lease's holder.
pub const ATTEMPT_LABEL: &str = "ralph.dev/attempt";
/// Label on agent Pods: what the attempt does, `work` or `verify` (a read-only check of work
/// reported done).
pub const ATTEMPT_KIND_LABEL: &str = "ralph.dev/attempt-kind";
/// Annotation on agent Pods: the attempt's prompt, mounted into the agent container through
/// the downward API (no separate object to write and delete).
pub const PROMPT_ANNOTATION: &str = "ralph.dev/prompt";
/// Annotation on agent Pods: the Task's `metadata.generation` the Pod was built for (its
/// prompt and settings). An attempt whose Pod was built for an older generation than the
/// Task's is superseded, even when the Pod was created from a cache that had not seen the
/// edit yet.
pub const TASK_GENERATION_ANNOTATION: &str = "ralph.dev/task-generation";
/// Label on every object the operator creates.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "ralph-operator";
/// Label on Tasks a planner wrote (docs/planning.md): the hash of the plan that holds them.
pub const PLAN_LABEL: &str = "ralph.dev/plan";
/// Annotation on a Feature: the hash (or 6 or more of its first digits) of the plan a
/// person approves (`ralph plan approve`, or `kubectl annotate`). An approval of another
/// plan than the current one changes nothing.
pub const APPROVE_PLAN_ANNOTATION: &str = "ralph.dev/approve-plan";
/// Annotation on a Feature: the hash of the plan a person rejects; the planner plans again
/// with [`REJECT_COMMENT_ANNOTATION`] in its prompt.
pub const REJECT_PLAN_ANNOTATION: &str = "ralph.dev/reject-plan";
/// Annotation on a Feature: why the plan named by [`REJECT_PLAN_ANNOTATION`] was rejected.
pub const REJECT_COMMENT_ANNOTATION: &str = "ralph.dev/reject-comment";
/// Prefix of the annotations on a Task (the controller's) naming the proposal ConfigMap of
/// one of its done attempts the Feature has not read yet: `proposal.ralph.dev/a<N>` for
/// attempt N, its value the ConfigMap's name (`<attempt>-proposal`). One key per attempt:
/// adding one proposal and removing another never overwrite each other.
pub const PROPOSAL_ANNOTATION_PREFIX: &str = "proposal.ralph.dev/";

/// The annotation naming the proposal of attempt `number` ([`PROPOSAL_ANNOTATION_PREFIX`]).
pub fn proposal_annotation(number: u32) -> String {
    format!("{PROPOSAL_ANNOTATION_PREFIX}a{number}")
}
/// Annotation on a Feature: who approved or rejected its plan (set by `ralph plan`).
pub const PLAN_ANSWERED_BY_ANNOTATION: &str = "ralph.dev/plan-answered-by";
