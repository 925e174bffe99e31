//! Claims as `coordination.k8s.io/v1` Leases: one per claimed task (and one for the
//! controller's leader election). Create fails when a Lease exists (no double claim), an
//! expired or released Lease is taken over by replace with a resourceVersion precondition
//! (raising `leaseTransitions`, the fencing token), renewals check the holder first,
//! release clears the holder with a precondition. A write that conflicts (the create finds
//! a Lease, or the take-over's precondition fails) is settled in one place
//! ([`Leases::settle_conflict`]): one live read of the Lease decides.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::PostParams;

use crate::controller::client::call::{CallError, bounded};
use crate::controller::plan::run_view::{claim_view, holder};

/// What a new claim should look like.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimRequest {
    /// Lease name (the task's name).
    pub lease: String,
    /// Holder identity (the attempt id, or the controller replica for leader election).
    pub holder: String,
    /// How long one renewal is valid, seconds.
    pub duration_seconds: i32,
    /// Owner of the Lease (the Task), so it goes away with it.
    pub owner: Option<OwnerReference>,
    /// Labels of the Lease (e.g. `ralph.dev/feature`, which the controller watches by).
    pub labels: BTreeMap<String, String>,
}

/// Why a claim operation did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// Someone else holds the Lease (create found one).
    #[error("Lease {lease} is already held by {holder}")]
    Held {
        /// The Lease.
        lease: String,
        /// Its current holder, when it names one.
        holder: String,
        /// The Lease as read live after the write conflicted.
        live: Box<Lease>,
    },
    /// The Lease changed between read and write (another writer won).
    #[error("Lease {lease} changed concurrently")]
    Conflict {
        /// The Lease.
        lease: String,
    },
    /// The caller is no longer the holder: fenced off.
    #[error("Lease {lease} is held by {holder}, not by {expected}")]
    NotHolder {
        /// The Lease.
        lease: String,
        /// The holder the caller expected to be.
        expected: String,
        /// The actual holder (empty when none).
        holder: String,
    },
    /// The Lease does not exist.
    #[error("Lease {lease} does not exist")]
    Gone {
        /// The Lease.
        lease: String,
    },
    /// The API call failed.
    #[error(transparent)]
    Call(#[from] CallError),
}

/// A fresh Lease for `request`, acquired and renewed at `now`.
pub fn new_lease(request: &ClaimRequest, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(request.lease.clone()),
            owner_references: request.owner.clone().map(|owner| vec![owner]),
            labels: Some(request.labels.clone()).filter(|l| !l.is_empty()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(request.holder.clone()),
            lease_duration_seconds: Some(request.duration_seconds),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }),
    }
}

/// `existing` handed to `request`'s holder at `now`: the fencing token (transitions) goes up;
/// the resourceVersion stays, so the replace fails if anyone wrote in between.
pub fn taken_over(existing: &Lease, request: &ClaimRequest, now: Timestamp) -> Lease {
    let transitions = lease_transitions(existing);
    let mut lease = new_lease(request, now);
    lease.metadata.resource_version = existing.metadata.resource_version.clone();
    lease.metadata.namespace = existing.metadata.namespace.clone();
    if let Some(spec) = lease.spec.as_mut() {
        spec.lease_transitions = Some(transitions.saturating_add(1));
    }
    lease
}

/// `existing` renewed at `now` (resourceVersion kept for the precondition).
pub fn renewed(existing: &Lease, now: Timestamp) -> Lease {
    let mut lease = existing.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.renew_time = Some(MicroTime(now));
    lease
}

/// `existing` with no holder: free for the next claim (resourceVersion kept for the
/// precondition, transitions kept for the fence).
pub fn released(existing: &Lease) -> Lease {
    let mut lease = existing.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    lease
}

/// The Lease's `leaseTransitions` (the fencing token), 0 when unset.
pub fn lease_transitions(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
}

/// True when nobody holds `lease` or its holder did not renew it in time.
pub fn is_expired(lease: &Lease, now: Timestamp) -> bool {
    claim_view(lease).is_none_or(|claim| claim.is_expired(now.as_millisecond()))
}

/// [`ClaimError::Held`] for `lease`, as `live` shows it.
fn held(lease: &str, live: Lease) -> ClaimError {
    ClaimError::Held {
        lease: lease.to_owned(),
        holder: holder(&live).unwrap_or_default().to_owned(),
        live: Box::new(live),
    }
}

/// Lease operations in one namespace, each API call under a timeout.
#[derive(Clone)]
pub struct Leases {
    api: Api<Lease>,
    timeout: Duration,
}

impl Leases {
    /// Lease operations through `api` (namespaced), each call limited to `timeout`.
    pub fn new(api: Api<Lease>, timeout: Duration) -> Self {
        Self { api, timeout }
    }

    /// Reads a Lease; `None` when it does not exist.
    pub async fn get(&self, name: &str) -> Result<Option<Lease>, ClaimError> {
        Ok(bounded(
            self.timeout,
            format!("get Lease {name}"),
            self.api.get_opt(name),
        )
        .await?)
    }

    /// Creates the claim; [`ClaimError::Held`] with the live Lease when one of that name
    /// exists ([`ClaimError::Gone`] when it was deleted before it could be read).
    pub async fn create(
        &self,
        request: &ClaimRequest,
        now: Timestamp,
    ) -> Result<Lease, ClaimError> {
        self.create_or_take_over(request, now, |_| false).await
    }

    /// Creates the claim; when a Lease of that name exists (a cache may not show it: spent
    /// claims are retired from the controller's), settles the conflict
    /// ([`Self::settle_conflict`]): the live Lease is taken over when `is_free` says it is
    /// free for this claim (expired, or spent).
    pub async fn create_or_take_over(
        &self,
        request: &ClaimRequest,
        now: Timestamp,
        is_free: impl FnOnce(&Lease) -> bool,
    ) -> Result<Lease, ClaimError> {
        let lease = new_lease(request, now);
        let op = format!("create Lease {}", request.lease);
        let params = PostParams::default();
        let call = self.api.create(&params, &lease);
        match bounded(self.timeout, op, call).await {
            Ok(lease) => Ok(lease),
            Err(error) if error.is_conflict() => self.settle_conflict(request, now, is_free).await,
            Err(error) => Err(error.into()),
        }
    }

    /// Takes over `existing` (expired, or our own stale claim) for `request`'s holder.
    /// [`ClaimError::Conflict`] when it changed since it was read.
    pub async fn take_over(
        &self,
        existing: &Lease,
        request: &ClaimRequest,
        now: Timestamp,
    ) -> Result<Lease, ClaimError> {
        let lease = taken_over(existing, request, now);
        let op = format!("take over Lease {}", request.lease);
        let params = PostParams::default();
        let call = self.api.replace(&request.lease, &params, &lease);
        bounded(self.timeout, op, call)
            .await
            .map_err(|error| self.classify(error, &request.lease))
    }

    /// Takes over `existing` (as a cache shows it) for `request`'s holder; when it changed
    /// since (a renewal the cache has not shown, so the precondition fails), settles the
    /// conflict ([`Self::settle_conflict`]).
    pub async fn take_over_or_settle(
        &self,
        existing: &Lease,
        request: &ClaimRequest,
        now: Timestamp,
        is_free: impl FnOnce(&Lease) -> bool,
    ) -> Result<Lease, ClaimError> {
        match self.take_over(existing, request, now).await {
            Err(ClaimError::Conflict { .. }) => self.settle_conflict(request, now, is_free).await,
            other => other,
        }
    }

    /// A write of `request`'s Lease conflicted: reads the Lease live once and decides from
    /// what it says. Taken over (one replace, with its resourceVersion) when `is_free` says
    /// it is free for this claim; [`ClaimError::Held`] with the live Lease when it is not;
    /// [`ClaimError::Gone`] when it no longer exists. Never a loop: a second conflict is
    /// [`ClaimError::Conflict`].
    pub async fn settle_conflict(
        &self,
        request: &ClaimRequest,
        now: Timestamp,
        is_free: impl FnOnce(&Lease) -> bool,
    ) -> Result<Lease, ClaimError> {
        match self.get(&request.lease).await? {
            None => Err(ClaimError::Gone {
                lease: request.lease.clone(),
            }),
            Some(live) if is_free(&live) => self.take_over(&live, request, now).await,
            Some(live) => Err(held(&request.lease, live)),
        }
    }

    /// Creates the claim, or takes over an existing one when it expired. `Held` otherwise.
    pub async fn acquire(
        &self,
        request: &ClaimRequest,
        now: Timestamp,
    ) -> Result<Lease, ClaimError> {
        match self.get(&request.lease).await? {
            None => self.create(request, now).await,
            Some(existing) if is_expired(&existing, now) => {
                self.take_over(&existing, request, now).await
            }
            Some(existing) if holder(&existing) == Some(request.holder.as_str()) => Ok(existing),
            Some(existing) => Err(held(&request.lease, existing)),
        }
    }

    /// Renews the Lease for `holder`; [`ClaimError::NotHolder`] when someone else holds it.
    pub async fn renew(
        &self,
        name: &str,
        holder_id: &str,
        now: Timestamp,
    ) -> Result<Lease, ClaimError> {
        let existing = self.get(name).await?.ok_or_else(|| ClaimError::Gone {
            lease: name.to_owned(),
        })?;
        let current = holder(&existing).unwrap_or_default();
        if current != holder_id {
            return Err(ClaimError::NotHolder {
                lease: name.to_owned(),
                expected: holder_id.to_owned(),
                holder: current.to_owned(),
            });
        }
        let lease = renewed(&existing, now);
        let op = format!("renew Lease {name}");
        bounded(
            self.timeout,
            op,
            self.api.replace(name, &PostParams::default(), &lease),
        )
        .await
        .map_err(|error| self.classify(error, name))
    }

    /// Renews `existing` (as read, e.g. from a cache) for `holder_id` without reading it first:
    /// the replace carries its resourceVersion, so a Lease changed meanwhile is
    /// [`ClaimError::Conflict`] and nothing is written.
    pub async fn renew_as_read(
        &self,
        existing: &Lease,
        holder_id: &str,
        now: Timestamp,
    ) -> Result<Lease, ClaimError> {
        let name = existing.metadata.name.clone().unwrap_or_default();
        let current = holder(existing).unwrap_or_default();
        if current != holder_id {
            return Err(ClaimError::NotHolder {
                lease: name,
                expected: holder_id.to_owned(),
                holder: current.to_owned(),
            });
        }
        let op = format!("renew Lease {name}");
        let lease = renewed(existing, now);
        let params = PostParams::default();
        let call = self.api.replace(&name, &params, &lease);
        bounded(self.timeout, op, call)
            .await
            .map_err(|error| self.classify(error, &name))
    }

    /// Frees `lease` (no holder; kept, so the next claim takes it over and raises the
    /// fencing token) if it was not changed since it was read. A Lease already gone is
    /// released; one changed meanwhile is [`ClaimError::Conflict`].
    pub async fn release(&self, lease: &Lease) -> Result<(), ClaimError> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let op = format!("release Lease {name}");
        let free = released(lease);
        let params = PostParams::default();
        let call = self.api.replace(&name, &params, &free);
        match bounded(self.timeout, op, call).await {
            Ok(_) => Ok(()),
            Err(error) if error.is_not_found() => Ok(()),
            Err(error) => Err(self.classify(error, &name)),
        }
    }

    fn classify(&self, error: CallError, lease: &str) -> ClaimError {
        if error.is_conflict() {
            ClaimError::Conflict {
                lease: lease.to_owned(),
            }
        } else if error.is_not_found() {
            ClaimError::Gone {
                lease: lease.to_owned(),
            }
        } else {
            error.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::lifecycle::ClaimView;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn request(holder: &str) -> ClaimRequest {
        ClaimRequest {
            lease: "feat-build".to_owned(),
            holder: holder.to_owned(),
            duration_seconds: 60,
            owner: None,
            labels: BTreeMap::new(),
        }
    }

    #[test]
    fn new_lease_names_the_holder_and_starts_fencing_at_zero() {
        let lease = new_lease(&request("feat-build-a1"), at(5_000));
        assert_eq!(holder(&lease), Some("feat-build-a1"));
        assert_eq!(lease_transitions(&lease), 0);
        assert_eq!(
            claim_view(&lease),
            Some(ClaimView {
                holder: "feat-build-a1".to_owned(),
                renewed_at_ms: 5_000,
                duration_ms: 60_000,
            })
        );
    }

    #[test]
    fn take_over_raises_the_fencing_token_and_keeps_the_resource_version() {
        let mut old = new_lease(&request("feat-build-a1"), at(0));
        old.metadata.resource_version = Some("42".to_owned());
        let new = taken_over(&old, &request("feat-build-a2"), at(90_000));
        assert_eq!(holder(&new), Some("feat-build-a2"));
        assert_eq!(lease_transitions(&new), 1);
        assert_eq!(new.metadata.resource_version.as_deref(), Some("42"));
    }

    #[test]
    fn renewal_moves_only_the_renew_time() {
        let old = new_lease(&request("feat-build-a1"), at(0));
        let new = renewed(&old, at(20_000));
        let view = claim_view(&new);
        assert_eq!(view.as_ref().map(|v| v.renewed_at_ms), Some(20_000));
        assert_eq!(holder(&new), holder(&old));
        assert_eq!(lease_transitions(&new), 0);
    }

    #[test]
    fn lease_expires_when_not_renewed_within_its_duration() {
        let lease = new_lease(&request("feat-build-a1"), at(0));
        assert!(!is_expired(&lease, at(59_999)));
        assert!(is_expired(&lease, at(60_000)));
    }

    #[test]
    fn a_released_lease_is_free_and_keeps_its_fencing_token() {
        let mut old = new_lease(&request("feat-build-a1"), at(0));
        old.metadata.resource_version = Some("7".to_owned());
        let taken = taken_over(&old, &request("feat-build-a2"), at(1_000));
        let free = released(&taken);
        assert_eq!(claim_view(&free), None);
        assert_eq!(lease_transitions(&free), 1);
        assert_eq!(free.metadata.resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn lease_without_holder_is_no_claim() {
        let mut lease = new_lease(&request("x"), at(0));
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
        }
        assert_eq!(claim_view(&lease), None);
        assert!(is_expired(&lease, at(0)));
    }
}
