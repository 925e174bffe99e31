//! WATCH: newline-delimited JSON events (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) from a
//! resourceVersion, with synthetic ADDED events for the current state when none is given,
//! streaming lists (`sendInitialEvents`), periodic bookmarks and `timeoutSeconds`.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use futures::SinkExt;
use futures::channel::mpsc;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::errors::ApiError;
use super::resources::ResourceType;
use super::selectors::{FieldSelector, LabelSelector};
use super::store::{Change, Store};

/// What a watch request asks for.
#[derive(Debug, Clone)]
pub struct WatchRequest {
    /// The watched type.
    pub rt: ResourceType,
    /// One namespace, or all.
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `resourceVersion`; unset, empty or "0" start with the current state.
    pub resource_version: Option<String>,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// `sendInitialEvents=true` (streaming list).
    pub send_initial_events: bool,
    /// `timeoutSeconds`.
    pub timeout: Duration,
}

impl WatchRequest {
    fn selects(&self, namespace: &str, object: &Value) -> bool {
        self.namespace.as_deref().is_none_or(|ns| ns == namespace)
            && self.labels.matches(object)
            && self.fields.matches(object)
    }

    /// The event a change produces for this watch: objects entering the selection are
    /// ADDED, leaving it DELETED.
    fn event_for(&self, change: &Change) -> Option<(&'static str, Arc<Value>)> {
        if change.resource != self.rt.group_resource() {
            return None;
        }
        let now = self.selects(&change.namespace, &change.object);
        let before = change
            .previous
            .as_ref()
            .is_some_and(|p| self.selects(&change.namespace, p));
        match (change.deleted, before, now) {
            (true, true, _) => Some(("DELETED", change.object.clone())),
            (true, false, _) => None,
            (false, true, true) => Some(("MODIFIED", change.object.clone())),
            (false, true, false) => Some(("DELETED", change.object.clone())),
            (false, false, true) => Some(("ADDED", change.object.clone())),
            (false, false, false) => None,
        }
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Value {
        let mut metadata = json!({ "resourceVersion": rv.to_string() });
        if initial_events_end {
            metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
        }
        json!({ "kind": self.rt.kind, "apiVersion": self.rt.api_version(), "metadata": metadata })
    }
}

fn line(event_type: &str, object: &Value) -> Bytes {
    let mut text = json!({ "type": event_type, "object": object }).to_string();
    text.push('\n');
    Bytes::from(text)
}

/// Injected watch faults: a disconnect signal (every open watch ends when it changes) and
/// a delivery lag for this watch's resource.
#[derive(Debug, Clone)]
pub struct WatchFaults {
    /// Changes whenever the server drops its open watches.
    pub disconnect: tokio::sync::watch::Receiver<u64>,
    /// Delay before each change is delivered.
    pub lag: Duration,
}

/// Starts a watch: the response body streams events until the timeout, the server's
/// shutdown, an injected disconnect, the client going away, or the watch falling too far
/// behind (the client then resumes from its last resourceVersion).
pub fn start(
    store: &Mutex<Store>,
    request: WatchRequest,
    bookmark_interval: Duration,
    shutdown: CancellationToken,
    faults: WatchFaults,
) -> Result<Body, ApiError> {
    let WatchFaults {
        mut disconnect,
        lag,
    } = faults;
    disconnect.mark_unchanged();
    let from_rv = match request.resource_version.as_deref() {
        None | Some("" | "0") => None,
        Some(_) if request.send_initial_events => None,
        Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("invalid resourceVersion {rv:?}: not a number"))
        })?),
    };
    let (initial, replay, mut changes, start_rv) = {
        let store = store
            .lock()
            .map_err(|_| ApiError::new(500, "InternalError", "store lock poisoned"))?;
        match from_rv {
            None => {
                let initial: Vec<Arc<Value>> = store
                    .iter(&request.rt, request.namespace.as_deref())
                    .filter(|((ns, _), object)| request.selects(ns, object))
                    .map(|(_, object)| object.clone())
                    .collect();
                (initial, Vec::new(), store.subscribe(), store.current_rv())
            }
            Some(rv) => match store.changes_since(rv) {
                Ok((replay, changes)) => (Vec::new(), replay, changes, rv),
                Err(gone) => {
                    let event = line("ERROR", &gone.to_status());
                    return Ok(Body::from(event));
                }
            },
        }
    };

    let (mut tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(256);
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + request.timeout;
        let mut progress_rv = start_rv;
        let mut pending: Vec<Bytes> = initial.iter().map(|o| line("ADDED", o)).collect();
        if request.send_initial_events {
            pending.push(line("BOOKMARK", &request.bookmark(start_rv, true)));
        }
        for change in &replay {
            progress_rv = change.rv;
            if let Some((kind, object)) = request.event_for(change) {
                pending.push(line(kind, &object));
            }
        }
        for bytes in pending {
            if tx.send(Ok(bytes)).await.is_err() {
                return;
            }
        }
        let mut ticker = tokio::time::interval(bookmark_interval);
        ticker.tick().await;
        loop {
            let bytes = tokio::select! {
                () = shutdown.cancelled() => return,
                _ = disconnect.changed() => return,
                () = tokio::time::sleep_until(deadline) => return,
                _ = ticker.tick(), if request.bookmarks => {
                    line("BOOKMARK", &request.bookmark(progress_rv, false))
                }
                received = changes.recv() => match received {
                    Ok(change) if change.rv <= progress_rv => continue,
                    Ok(change) => {
                        if !lag.is_zero() {
                            tokio::time::sleep(lag).await;
                        }
                        progress_rv = change.rv;
                        match request.event_for(&change) {
                            Some((kind, object)) => line(kind, &object),
                            None => continue,
                        }
                    }
                    Err(RecvError::Lagged(_) | RecvError::Closed) => return,
                },
            };
            if tx.send(Ok(bytes)).await.is_err() {
                return;
            }
        }
    });
    Ok(Body::from_stream(rx))
}
