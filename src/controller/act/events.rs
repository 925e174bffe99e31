//! Kubernetes Events on transitions (claims, starts, outcomes, retries, invalid specs).
//! Publishing is best effort: a failed Event never fails a reconcile.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

use crate::engine::policy::{self, EventKind};

/// Publishes Events under a time limit.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    timeout: Duration,
}

/// Longest Event note the API accepts.
const MAX_NOTE_BYTES: usize = 1024;

impl Events {
    /// Events through `recorder`, each call limited to `timeout`.
    pub fn new(recorder: Recorder, timeout: Duration) -> Self {
        Self { recorder, timeout }
    }

    /// A Normal event.
    pub async fn normal(&self, regarding: &ObjectReference, reason: &str, note: String) {
        self.publish(regarding, EventType::Normal, reason, note)
            .await;
    }

    /// A Warning event.
    pub async fn warning(&self, regarding: &ObjectReference, reason: &str, note: String) {
        self.publish(regarding, EventType::Warning, reason, note)
            .await;
    }

    /// The event a policy decision asks for.
    pub async fn decision(&self, regarding: &ObjectReference, event: &policy::Event) {
        let type_ = match event.kind {
            EventKind::Normal => EventType::Normal,
            EventKind::Warning => EventType::Warning,
        };
        self.publish(regarding, type_, event.reason, event.message.clone())
            .await;
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(truncate(note)),
            action: reason.to_owned(),
            secondary: None,
        };
        match tokio::time::timeout(self.timeout, self.recorder.publish(&event, regarding)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, reason, "could not publish an Event"),
            Err(_) => tracing::warn!(reason, "publishing an Event timed out"),
        }
    }
}

fn truncate(mut note: String) -> String {
    if note.len() > MAX_NOTE_BYTES {
        let mut end = MAX_NOTE_BYTES;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_at_a_char_boundary_within_the_limit() {
        let note = "é".repeat(MAX_NOTE_BYTES);
        let cut = truncate(note);
        assert!(cut.len() <= MAX_NOTE_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
