//! Leader election with a `coordination.k8s.io/v1` Lease, so two replicas are safe: only
//! the holder reconciles. Built on the same Lease operations as task claims, with
//! client-go's timings: a leader that cannot renew within the renew deadline stops leading
//! (before its Lease expires for the others) and campaigns again; it never exits.

use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::controller::act::claim::{ClaimError, ClaimRequest, Leases};

/// Leader election settings.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    /// Name of the election Lease.
    pub lease: String,
    /// This replica's identity (its Pod name).
    pub identity: String,
    /// How long leadership lasts without renewal (the Lease's duration; default 15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops leading (default 10 s).
    pub renew_deadline: Duration,
    /// Interval between acquire and renew attempts (default 2 s).
    pub retry_period: Duration,
}

/// Election timings that cannot work together.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TimingError {
    /// The renew deadline is not shorter than the lease duration.
    #[error(
        "leader renew deadline ({renew_deadline:?}) must be shorter than the lease duration \
         ({lease_duration:?}), or two replicas can lead at once"
    )]
    DeadlineNotBelowDuration {
        /// The renew deadline.
        renew_deadline: Duration,
        /// The lease duration.
        lease_duration: Duration,
    },
    /// The retry period leaves no room for a retry within the renew deadline.
    #[error(
        "leader retry period ({retry_period:?}) must be shorter than the renew deadline \
         ({renew_deadline:?})"
    )]
    RetryNotBelowDeadline {
        /// The retry period.
        retry_period: Duration,
        /// The renew deadline.
        renew_deadline: Duration,
    },
    /// The lease duration is under a second (Leases count whole seconds).
    #[error("leader lease duration ({0:?}) must be at least 1s")]
    DurationTooShort(Duration),
}

impl ElectionConfig {
    /// Checks that the timings can work: lease duration > renew deadline > retry period.
    pub fn validate(&self) -> Result<(), TimingError> {
        if self.lease_duration < Duration::from_secs(1) {
            return Err(TimingError::DurationTooShort(self.lease_duration));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(TimingError::DeadlineNotBelowDuration {
                renew_deadline: self.renew_deadline,
                lease_duration: self.lease_duration,
            });
        }
        if self.retry_period >= self.renew_deadline {
            return Err(TimingError::RetryNotBelowDeadline {
                retry_period: self.retry_period,
                renew_deadline: self.renew_deadline,
            });
        }
        Ok(())
    }

    fn request(&self) -> ClaimRequest {
        ClaimRequest {
            lease: self.lease.clone(),
            holder: self.identity.clone(),
            duration_seconds: i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX),
            owner: None,
            labels: Default::default(),
        }
    }
}

/// A running election. [`Election::leading`] says whether this replica leads right now;
/// dropping the election stops campaigning.
pub struct Election {
    leading: watch::Receiver<bool>,
    task: JoinHandle<()>,
}

impl Drop for Election {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Election {
    /// A receiver that is `true` while this replica leads.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }
}

/// Campaigns for ever: acquire, renew while possible, and on losing leadership (renewals
/// failing past the deadline, or fenced off) campaign again.
pub fn spawn(leases: Leases, config: ElectionConfig) -> Election {
    let (sender, leading) = watch::channel(false);
    let task = tokio::spawn(async move {
        loop {
            acquire(&leases, &config).await;
            tracing::info!(identity = %config.identity, "became leader");
            if sender.send(true).is_err() {
                return;
            }
            keep(&leases, &config).await;
            tracing::warn!(identity = %config.identity, "stopped leading; campaigning again");
            if sender.send(false).is_err() {
                return;
            }
        }
    });
    Election { leading, task }
}

async fn acquire(leases: &Leases, config: &ElectionConfig) {
    let request = config.request();
    loop {
        match leases.acquire(&request, Timestamp::now()).await {
            Ok(_) => return,
            Err(ClaimError::Held { holder, .. }) => {
                tracing::debug!(%holder, "another replica leads; waiting");
            }
            Err(error) => tracing::warn!(%error, "leader election failed; retrying"),
        }
        tokio::time::sleep(config.retry_period).await;
    }
}

/// Renews every retry period until leadership is lost: fenced off, the Lease deleted, or no
/// renewal succeeding within the renew deadline.
async fn keep(leases: &Leases, config: &ElectionConfig) {
    let mut last_renewal = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(config.retry_period).await;
        let renewal = tokio::time::timeout(
            config.renew_deadline,
            leases.renew(&config.lease, &config.identity, Timestamp::now()),
        )
        .await;
        match renewal {
            Ok(Ok(_)) => last_renewal = tokio::time::Instant::now(),
            Ok(Err(error @ (ClaimError::NotHolder { .. } | ClaimError::Gone { .. }))) => {
                tracing::error!(%error, "leadership lost");
                return;
            }
            Ok(Err(error)) if last_renewal.elapsed() >= config.renew_deadline => {
                tracing::error!(%error, "leadership not renewed within the renew deadline");
                return;
            }
            Err(_) if last_renewal.elapsed() >= config.renew_deadline => {
                tracing::error!("leadership not renewed within the renew deadline");
                return;
            }
            Ok(Err(error)) => tracing::warn!(%error, "leader renewal failed; retrying"),
            Err(_) => tracing::warn!("leader renewal timed out; retrying"),
        }
    }
}

/// Gives up leadership on shutdown so a standby replica takes over at once.
pub async fn resign(leases: &Leases, config: &ElectionConfig) {
    match leases.get(&config.lease).await {
        Ok(Some(lease))
            if crate::controller::plan::run_view::holder(&lease)
                == Some(config.identity.as_str()) =>
        {
            if let Err(error) = leases.release(&lease).await {
                tracing::warn!(%error, "could not release the leader Lease");
            }
        }
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "could not read the leader Lease"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timings(duration: u64, deadline: u64, retry: u64) -> ElectionConfig {
        ElectionConfig {
            lease: "leader".to_owned(),
            identity: "a".to_owned(),
            lease_duration: Duration::from_secs(duration),
            renew_deadline: Duration::from_secs(deadline),
            retry_period: Duration::from_secs(retry),
        }
    }

    #[test]
    fn client_go_default_timings_are_valid() {
        assert_eq!(timings(15, 10, 2).validate(), Ok(()));
    }

    #[test]
    fn renew_deadline_must_be_below_lease_duration() {
        assert!(matches!(
            timings(10, 10, 2).validate(),
            Err(TimingError::DeadlineNotBelowDuration { .. })
        ));
    }

    #[test]
    fn retry_period_must_be_below_renew_deadline() {
        assert!(matches!(
            timings(15, 10, 10).validate(),
            Err(TimingError::RetryNotBelowDeadline { .. })
        ));
    }
}
