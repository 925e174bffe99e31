//! The agent Pod's claim keeper (`ralph sidecar`): renews the attempt's Lease every third
//! of its duration while the runner's heartbeat file is fresh, and stops as soon as the
//! attempt no longer holds the Lease (fencing).

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};

use super::claim::{ClaimError, Leases};

/// Shortest pause between two renewals.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// What the sidecar needs to know.
#[derive(Clone, Debug)]
pub struct SidecarConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub lease: String,
    /// The attempt id that must hold the Lease.
    pub holder: String,
    /// File the runner touches while the agent is active.
    pub heartbeat_file: PathBuf,
    /// A heartbeat older than this is stale: renewals stop.
    pub heartbeat_max_age: Duration,
    /// Before the heartbeat file first appears, renew for at most this long (image pulls,
    /// runner start-up).
    pub startup_grace: Duration,
    /// Limit of each API call.
    pub api_timeout: Duration,
    /// Exit once the heartbeat is stale (a plain sidecar container must end for its Pod to
    /// complete; a native sidecar is stopped by the kubelet instead).
    pub exit_when_stale: bool,
}

/// The runner's heartbeat, as the sidecar judges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heartbeat {
    /// Touched within the allowed age.
    Fresh,
    /// Not there yet, within the start-up grace.
    Starting,
    /// Too old, or never appeared within the grace.
    Stale,
}

/// Judges the heartbeat from its file's modification time (`None` when absent).
pub fn judge_heartbeat(
    modified: Option<SystemTime>,
    now: SystemTime,
    started: SystemTime,
    config: &SidecarConfig,
) -> Heartbeat {
    let age = |t: SystemTime| now.duration_since(t).unwrap_or(Duration::ZERO);
    match modified {
        Some(t) if age(t) <= config.heartbeat_max_age => Heartbeat::Fresh,
        Some(_) => Heartbeat::Stale,
        None if age(started) <= config.startup_grace => Heartbeat::Starting,
        None => Heartbeat::Stale,
    }
}

/// The pause between renewals: a third of the Lease duration.
pub fn renew_interval(lease_duration_seconds: i32) -> Duration {
    let millis = u64::try_from(lease_duration_seconds).unwrap_or(0) * 1000 / 3;
    Duration::from_millis(millis).max(MIN_INTERVAL)
}

/// Why the sidecar stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SidecarExit {
    /// Asked to stop (SIGTERM): the Pod is going away.
    Stopped,
    /// The heartbeat went stale and `exit_when_stale` is set.
    Stale,
    /// Another holder owns the Lease now: this attempt was fenced off.
    Fenced {
        /// The new holder (empty when none).
        holder: String,
    },
    /// The Lease was deleted (the controller released the claim).
    Released,
}

/// A failure that stops the sidecar before it could renew anything.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    /// The Lease could not be read at start.
    #[error("cannot read Lease {namespace}/{lease}: {source}")]
    Read {
        /// Namespace.
        namespace: String,
        /// Lease name.
        lease: String,
        /// The cause.
        #[source]
        source: ClaimError,
    },
}

/// Renews the Lease until fenced, released, stale (if configured) or `shutdown` completes.
pub async fn run(
    client: Client,
    config: SidecarConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<SidecarExit, SidecarError> {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let leases = Leases::new(api, config.api_timeout);
    let read_error = |source| SidecarError::Read {
        namespace: config.namespace.clone(),
        lease: config.lease.clone(),
        source,
    };
    let Some(lease) = leases.get(&config.lease).await.map_err(read_error)? else {
        return Ok(SidecarExit::Released);
    };
    let duration = lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_duration_seconds)
        .unwrap_or(60);
    let interval = renew_interval(duration);
    let started = SystemTime::now();
    tokio::pin!(shutdown);
    loop {
        if let Some(exit) = tick(&leases, &config, started).await {
            return Ok(exit);
        }
        tokio::select! {
            () = &mut shutdown => return Ok(SidecarExit::Stopped),
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// One renewal round; `Some` when the sidecar must stop.
async fn tick(leases: &Leases, config: &SidecarConfig, started: SystemTime) -> Option<SidecarExit> {
    let modified = tokio::fs::metadata(&config.heartbeat_file)
        .await
        .and_then(|m| m.modified())
        .ok();
    match judge_heartbeat(modified, SystemTime::now(), started, config) {
        Heartbeat::Stale if config.exit_when_stale => return Some(SidecarExit::Stale),
        Heartbeat::Stale => {
            tracing::warn!(lease = %config.lease, "runner heartbeat is stale; not renewing");
            return None;
        }
        Heartbeat::Fresh | Heartbeat::Starting => {}
    }
    match leases
        .renew(&config.lease, &config.holder, Timestamp::now())
        .await
    {
        Ok(_) => {
            tracing::debug!(lease = %config.lease, "renewed");
            None
        }
        // Released: the Lease is kept with no holder (or, from older controllers, deleted).
        Err(ClaimError::NotHolder { holder, .. }) if holder.is_empty() => {
            Some(SidecarExit::Released)
        }
        Err(ClaimError::NotHolder { holder, .. }) => Some(SidecarExit::Fenced { holder }),
        Err(ClaimError::Gone { .. }) => Some(SidecarExit::Released),
        Err(error) => {
            tracing::warn!(lease = %config.lease, %error, "renewal failed; will retry");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::testing::named_cases;

    fn config() -> SidecarConfig {
        SidecarConfig {
            namespace: "ns".to_owned(),
            lease: "feat-build".to_owned(),
            holder: "feat-build-a1".to_owned(),
            heartbeat_file: PathBuf::from("/ralph/run/heartbeat"),
            heartbeat_max_age: Duration::from_secs(600),
            startup_grace: Duration::from_secs(300),
            api_timeout: Duration::from_secs(10),
            exit_when_stale: false,
        }
    }

    fn secs(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    /// Asserts how a heartbeat last written at `last` is judged at `now` (the sidecar started
    /// at 0).
    fn assert_heartbeat(last: Option<SystemTime>, now: SystemTime, expected: Heartbeat) {
        assert_eq!(judge_heartbeat(last, now, secs(0), &config()), expected);
    }

    named_cases! { assert_heartbeat;
        recent_heartbeat_is_fresh(Some(secs(1_000)), secs(1_600), Heartbeat::Fresh);
        heartbeat_older_than_max_age_is_stale(Some(secs(1_000)), secs(1_601), Heartbeat::Stale);
        missing_heartbeat_within_startup_grace_is_starting(None, secs(300), Heartbeat::Starting);
        heartbeat_that_never_appeared_after_grace_is_stale(None, secs(301), Heartbeat::Stale);
        heartbeat_from_the_future_counts_as_fresh(Some(secs(2_000)), secs(1_000), Heartbeat::Fresh);
    }

    #[test]
    fn renewals_happen_every_third_of_the_lease_duration() {
        assert_eq!(renew_interval(60), Duration::from_secs(20));
        assert_eq!(renew_interval(15), Duration::from_secs(5));
    }

    #[test]
    fn renew_interval_never_drops_below_one_second() {
        assert_eq!(renew_interval(0), MIN_INTERVAL);
        assert_eq!(renew_interval(-5), MIN_INTERVAL);
    }
}
