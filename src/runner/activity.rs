//! When the agent last sent ACP traffic, and the heartbeat file the claim sidecar
//! watches (touched at most once a second).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sync::lock;

/// Shortest interval between two heartbeat writes.
pub(super) const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);

/// Traffic bookkeeping shared by the transport and the supervisor.
#[derive(Debug)]
pub(super) struct Activity {
    last_traffic: Mutex<Instant>,
    heartbeat: Option<Heartbeat>,
}

#[derive(Debug)]
struct Heartbeat {
    path: PathBuf,
    last_write: Mutex<Option<Instant>>,
}

impl Activity {
    /// Starts the clock now; writes the first heartbeat at once.
    pub(super) fn new(heartbeat_file: Option<PathBuf>) -> Self {
        let activity = Self {
            last_traffic: Mutex::new(Instant::now()),
            heartbeat: heartbeat_file.map(|path| Heartbeat {
                path,
                last_write: Mutex::new(None),
            }),
        };
        activity.beat(Instant::now());
        activity
    }

    /// Records traffic from the agent.
    pub(super) fn touch(&self) {
        let now = Instant::now();
        *lock(&self.last_traffic) = now;
        self.beat(now);
    }

    /// When the agent last sent anything.
    pub(super) fn last_traffic(&self) -> Instant {
        *lock(&self.last_traffic)
    }

    fn beat(&self, now: Instant) {
        let Some(heartbeat) = &self.heartbeat else {
            return;
        };
        let mut last_write = lock(&heartbeat.last_write);
        if last_write.is_some_and(|last| now.duration_since(last) < HEARTBEAT_INTERVAL) {
            return;
        }
        *last_write = Some(now);
        // The content is the Unix time in milliseconds; the file's mtime changes too.
        // A failed write only makes the sidecar see a stale heartbeat.
        if let Err(error) = std::fs::write(&heartbeat.path, crate::clock::now_ms().to_string()) {
            tracing::warn!(path = %heartbeat.path.display(), %error, "cannot write the heartbeat file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heartbeat_file_is_written_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heartbeat");
        let _activity = Activity::new(Some(path.clone()));
        let content = std::fs::read_to_string(&path).unwrap();
        assert!(content.parse::<i64>().unwrap() > 0);
    }

    #[test]
    fn traffic_within_a_second_does_not_rewrite_the_heartbeat() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heartbeat");
        let activity = Activity::new(Some(path.clone()));
        std::fs::remove_file(&path).unwrap();
        activity.touch();
        assert!(!path.exists());
    }
}
