//! The claim protocol of one task, owned by one value ([`Claims`], after kubert's
//! `LeaseManager`): claim (create the Lease, or take over an expired, spent or released one,
//! within the controller's attempt slots), renew while the run waits to start, release, and
//! the live read that confirms a claim lost. The slot taken for a claim is given back in
//! one place ([`Claims::claim`]); a write refused as a conflict is settled by one live read
//! of the Lease, never a loop ([`super::claim::Leases::settle_conflict`]).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, ResourceExt};

use super::claim::{ClaimError, ClaimRequest, Leases, is_expired, lease_transitions};
use super::error::TaskError;
use crate::api::Feature;
use crate::controller::cache::slots::{NewClaim, SlotCaches};
use crate::controller::plan::cached::CachedTask;
use crate::controller::plan::decide::TaskPlan;
use crate::controller::plan::run_view::holder;
use crate::controller::runtime::context::Context;
use crate::engine::lifecycle::{AttemptEnd, attempt_id, is_spent};

/// What came of a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Claimed {
    /// The task holds the claim for the attempt.
    Held,
    /// Every attempt slot of the controller is taken: the task waits.
    NoSlot,
    /// Someone else holds the Lease, or changed or deleted it meanwhile: the next reconcile
    /// decides.
    Lost,
}

/// One task's claim Lease over a reconcile: the Lease as last read or written, and the
/// operations on it.
pub(crate) struct Claims<'c> {
    ctx: &'c Context,
    leases: Leases,
    /// `namespace/name` of the task (the key of its attempt slot).
    key: String,
    held: Option<Lease>,
}

impl<'c> Claims<'c> {
    /// The claim of Task `name` in `namespace`, `held` as the cache shows it.
    pub(crate) fn new(ctx: &'c Context, namespace: &str, name: &str, held: Option<Lease>) -> Self {
        Claims {
            ctx,
            leases: Leases::new(
                Api::namespaced(ctx.client.clone(), namespace),
                ctx.api_timeout,
            ),
            key: format!("{namespace}/{name}"),
            held,
        }
    }

    /// The Lease as last read or written.
    pub(crate) fn held(&self) -> Option<&Lease> {
        self.held.as_ref()
    }

    /// Claims `plan`'s task for `attempt` (`replace`: the Lease is spent or released and is
    /// taken over even though it has not expired). A spent, released or expired Lease is
    /// taken over, not re-created: the fencing token (`leaseTransitions`) counts the
    /// attempts that held it.
    pub(crate) async fn claim(
        &mut self,
        feature: &Feature,
        plan: &TaskPlan,
        attempt: u32,
        replace: bool,
        now_ms: i64,
    ) -> Result<Claimed, TaskError> {
        let now = crate::controller::plan::time::time(now_ms).0;
        let request = claim_request(feature, &plan.task, attempt)?;
        if !self.take_slot(&request, attempt, now_ms) {
            tracing::debug!(task = %plan.view.name, "controller at --max-concurrent-attempts");
            return Ok(Claimed::NoSlot);
        }
        match self.acquire(plan, &request, replace, now).await {
            Ok(lease) => {
                self.held = Some(lease);
                Ok(Claimed::Held)
            }
            Err(error) => {
                self.ctx.cache.slots.forget(&self.key);
                match error {
                    ClaimError::Held { .. }
                    | ClaimError::Conflict { .. }
                    | ClaimError::Gone { .. } => Ok(Claimed::Lost),
                    error => Err(error.into()),
                }
            }
        }
    }

    fn take_slot(&self, request: &ClaimRequest, attempt: u32, now_ms: i64) -> bool {
        let ctx = self.ctx;
        let running = ctx.cache.indexes.running(&ctx.cache.tasks);
        let wanted = NewClaim {
            key: &self.key,
            attempt,
            expires_at_ms: now_ms + i64::from(request.duration_seconds).saturating_mul(1000),
        };
        let caches = SlotCaches {
            running: &running,
            tasks: &ctx.cache.tasks,
            leases: &ctx.cache.leases,
        };
        ctx.cache.slots.take(&wanted, caches, now_ms)
    }

    /// Takes over the cached Lease when it is free (spent or released: `replace`; or
    /// expired), otherwise creates the claim; a conflict either way is settled by one live
    /// read ([`Leases::settle_conflict`], free when [`is_free_for`] the task). A cached
    /// Lease the API server no longer has is forgotten and the claim created. A Lease
    /// found really held goes back in the cache (it may have been retired from it:
    /// [`crate::controller::cache::lease_cache`]).
    async fn acquire(
        &self,
        plan: &TaskPlan,
        request: &ClaimRequest,
        replace: bool,
        now: Timestamp,
    ) -> Result<Lease, ClaimError> {
        let free = |live: &Lease| is_free_for(plan, &request.lease, live, now);
        let outcome = match &self.held {
            Some(existing) if replace || is_expired(existing, now) => {
                match self
                    .leases
                    .take_over_or_settle(existing, request, now, free)
                    .await
                {
                    Err(ClaimError::Gone { .. }) => {
                        self.ctx.cache.lease_cache.forget_gone(existing);
                        self.leases.create_or_take_over(request, now, free).await
                    }
                    other => other,
                }
            }
            _ => self.leases.create_or_take_over(request, now, free).await,
        };
        if let Err(ClaimError::Held { live, .. }) = &outcome {
            self.ctx.cache.lease_cache.restore(Lease::clone(live));
        }
        outcome
    }

    /// Renews the held claim for `holder_id` without reading it first. `false` when there is
    /// none, or it changed meanwhile (left to the next reconcile).
    pub(crate) async fn renew(&self, holder_id: &str, now: Timestamp) -> Result<bool, TaskError> {
        let Some(lease) = &self.held else {
            return Ok(false);
        };
        match self.leases.renew_as_read(lease, holder_id, now).await {
            Ok(_) => Ok(true),
            Err(
                ClaimError::NotHolder { .. }
                | ClaimError::Conflict { .. }
                | ClaimError::Gone { .. },
            ) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    /// Gives the held claim back (no holder; the Lease is kept, so the next claim takes it
    /// over and raises the fencing token). A Lease changed or deleted meanwhile is left as
    /// it is.
    pub(crate) async fn release(&self) -> Result<(), TaskError> {
        let Some(lease) = &self.held else {
            return Ok(());
        };
        match self.leases.release(lease).await {
            Ok(()) | Err(ClaimError::Conflict { .. } | ClaimError::Gone { .. }) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Whether the live Lease `name` is still held by `holder_id` and not expired (the cache
    /// showing it lost may be behind).
    pub(crate) async fn is_still_held(
        &self,
        name: &str,
        holder_id: &str,
    ) -> Result<bool, TaskError> {
        let now = crate::controller::plan::time::time(crate::clock::now_ms()).0;
        let live = self.leases.get(name).await?;
        Ok(live.is_some_and(|lease| holder(&lease) == Some(holder_id) && !is_expired(&lease, now)))
    }

    /// The fence checked on ingest: a result counts only while the claim Lease has not been
    /// taken over since the attempt started (`leaseTransitions` not above the token recorded
    /// at start; below it only means the Lease cache is behind). A result from a fenced-off
    /// attempt is ruled a lost claim.
    pub(crate) fn fenced_off(&self, plan: &TaskPlan, end: &AttemptEnd) -> Option<AttemptEnd> {
        let (AttemptEnd::Reported(_), Some(lease)) = (end, &self.held) else {
            return None;
        };
        let recorded = plan.task.status.as_ref()?.claim.as_ref()?.fencing_token;
        let current = lease_transitions(lease);
        (current > recorded).then(|| AttemptEnd::ClaimLost {
            reason: format!(
                "fenced off: the attempt started with fencing token {recorded}, the claim Lease is at {current}"
            ),
        })
    }
}

/// True when the live Lease `lease` may be taken over for `plan`'s task: expired, or spent
/// by one of its concluded attempts.
fn is_free_for(plan: &TaskPlan, lease: &str, live: &Lease, now: Timestamp) -> bool {
    let status = plan.task.status.as_ref();
    is_expired(live, now)
        || holder(live).is_some_and(|holder| {
            is_spent(
                lease,
                status.map(|s| s.phase).unwrap_or_default(),
                status.map_or(0, |s| s.attempt_count),
                holder,
            )
        })
}

fn claim_request(
    feature: &Feature,
    task: &CachedTask,
    attempt: u32,
) -> Result<ClaimRequest, TaskError> {
    let name = task.name_any();
    let owner = task
        .controller_owner_ref(&())
        .filter(|o| !o.uid.is_empty())
        .ok_or_else(|| TaskError::Malformed {
            task: name.clone(),
            problem: "no uid (not read from the API server)",
        })?;
    Ok(ClaimRequest {
        lease: name.clone(),
        holder: attempt_id(&name, attempt),
        duration_seconds: i32::try_from(feature.spec.lease_duration_seconds).unwrap_or(i32::MAX),
        owner: Some(owner),
        labels: BTreeMap::from([
            (
                crate::controller::plan::pod::FEATURE_LABEL.to_owned(),
                feature.name_any(),
            ),
            (
                crate::controller::plan::pod::TASK_LABEL.to_owned(),
                crate::controller::plan::decide::task_id(task),
            ),
            (
                crate::controller::plan::pod::TASK_OBJECT_LABEL.to_owned(),
                name,
            ),
        ]),
    })
}
