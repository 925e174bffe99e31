//! Leader election with a `coordination.k8s.io/v1` Lease, so two replicas are safe: only
//! the holder reconciles. Built on the same Lease operations as task claims.

use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::watch;

use super::claim::{ClaimError, ClaimRequest, Leases};
use super::sidecar::renew_interval;

/// Leader election settings.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    /// Name of the election Lease.
    pub lease: String,
    /// This replica's identity (its Pod name).
    pub identity: String,
    /// How long leadership lasts without renewal, seconds.
    pub duration_seconds: i32,
}

/// Runs the election: waits until this replica leads, then renews. The returned receiver
/// turns `true` once leading and `false` when leadership is lost (the caller stops).
pub fn spawn(leases: Leases, config: ElectionConfig) -> watch::Receiver<bool> {
    let (sender, receiver) = watch::channel(false);
    tokio::spawn(async move {
        acquire(&leases, &config).await;
        tracing::info!(identity = %config.identity, "became leader");
        if sender.send(true).is_err() {
            return;
        }
        keep(&leases, &config).await;
        let _ = sender.send(false);
    });
    receiver
}

fn request(config: &ElectionConfig) -> ClaimRequest {
    ClaimRequest {
        lease: config.lease.clone(),
        holder: config.identity.clone(),
        duration_seconds: config.duration_seconds,
        owner: None,
        labels: Default::default(),
    }
}

async fn acquire(leases: &Leases, config: &ElectionConfig) {
    let interval = renew_interval(config.duration_seconds);
    loop {
        match leases.acquire(&request(config), Timestamp::now()).await {
            Ok(_) => return,
            Err(ClaimError::Held { holder, .. }) => {
                tracing::debug!(%holder, "another replica leads; waiting");
            }
            Err(error) => tracing::warn!(%error, "leader election failed; retrying"),
        }
        tokio::time::sleep(interval).await;
    }
}

/// Renews until leadership is lost (fenced, deleted, or not renewed within its duration).
async fn keep(leases: &Leases, config: &ElectionConfig) {
    let interval = renew_interval(config.duration_seconds);
    let duration = Duration::from_secs(u64::try_from(config.duration_seconds).unwrap_or(0));
    let mut last_renewal = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(interval).await;
        match leases
            .renew(&config.lease, &config.identity, Timestamp::now())
            .await
        {
            Ok(_) => {
                last_renewal = tokio::time::Instant::now();
            }
            Err(error @ (ClaimError::NotHolder { .. } | ClaimError::Gone { .. })) => {
                tracing::error!(%error, "leadership lost");
                return;
            }
            Err(error) if last_renewal.elapsed() >= duration => {
                tracing::error!(%error, "leadership expired: renewals kept failing");
                return;
            }
            Err(error) => tracing::warn!(%error, "leader renewal failed; retrying"),
        }
    }
}

/// Gives up leadership on shutdown so a standby replica takes over at once.
pub async fn resign(leases: &Leases, config: &ElectionConfig) {
    match leases.get(&config.lease).await {
        Ok(Some(lease)) if super::claim::holder(&lease) == Some(config.identity.as_str()) => {
            if let Err(error) = leases.release(&lease).await {
                tracing::warn!(%error, "could not release the leader Lease");
            }
        }
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "could not read the leader Lease"),
    }
}
