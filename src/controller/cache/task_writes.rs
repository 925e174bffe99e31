//! The read-your-writes overlay of the Task cache: the Task statuses this process wrote
//! that the watch has not delivered yet.

use std::collections::HashMap;
use std::sync::Arc;

use crate::api::Task;
use crate::controller::plan::cached::CachedTask;

/// The Tasks this process wrote whose newer version the Task cache does not show yet, so
/// that the next reconcile decides from what was written (read-your-writes) instead of
/// from a stale cache that only earns a 409 Conflict.
#[derive(Clone, Debug, Default)]
pub struct TaskWrites {
    /// By `namespace/name`.
    written: Arc<std::sync::Mutex<HashMap<String, Written>>>,
}

/// A Task as written, and the resourceVersions it supersedes: the cached one the first of
/// this process's consecutive writes replaced, and those of the writes in between (the
/// cache may show any of them while it catches up).
type Written = (Arc<CachedTask>, Vec<Option<String>>);

impl TaskWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Written>> {
        crate::sync::lock(&self.written)
    }

    /// Records `written`, which replaced `from` (a cached object, or one recorded here).
    pub(crate) fn record(&self, from: &CachedTask, written: Task) {
        let written = CachedTask::from(written);
        let key = object_key(&written);
        let mut map = self.lock();
        let from_rv = from.resource_version();
        let superseded = match map.remove(&key) {
            // Written from our own newer version: the cache may still show an older one.
            Some((ours, mut superseded)) if ours.resource_version() == from_rv => {
                superseded.push(from_rv);
                superseded
            }
            _ => vec![from_rv],
        };
        map.insert(key, (Arc::new(written), superseded));
    }

    /// `cached`, or the newer version this process wrote while the cache shows a version
    /// that write superseded. Entries the cache has moved past are dropped.
    pub fn newest(&self, cached: Arc<CachedTask>) -> Arc<CachedTask> {
        let key = object_key(&cached);
        let mut map = self.lock();
        match map.get(&key).map(|written| ours_over(written, &cached)) {
            Some(Some(ours)) => ours,
            Some(None) => {
                map.remove(&key);
                cached
            }
            None => cached,
        }
    }

    /// [`TaskWrites::newest`] of each Task, under one lock and without a key allocated per
    /// Task (a reconcile of a large Feature reads thousands).
    pub fn newest_of_all(&self, cached: Vec<Arc<CachedTask>>) -> Vec<Arc<CachedTask>> {
        let mut map = self.lock();
        if map.is_empty() {
            return cached;
        }
        let mut passed = Vec::new();
        let newest = {
            let written: rustc_hash::FxHashMap<(&str, &str), (&String, &Written)> = map
                .iter()
                .filter_map(|(key, w)| Some((key.split_once('/')?, (key, w))))
                .collect();
            cached
                .into_iter()
                .map(|cached| {
                    let namespace = cached.metadata.namespace.as_deref().unwrap_or("");
                    let name = cached.metadata.name.as_deref().unwrap_or("");
                    let Some((key, entry)) = written.get(&(namespace, name)) else {
                        return cached;
                    };
                    ours_over(entry, &cached).unwrap_or_else(|| {
                        passed.push((*key).clone());
                        cached
                    })
                })
                .collect()
        };
        for key in passed {
            map.remove(&key);
        }
        newest
    }
}

/// Our written version while `cached` shows a version that write superseded; `None` once the
/// cache has moved past it (the entry is spent).
fn ours_over(written: &Written, cached: &CachedTask) -> Option<Arc<CachedTask>> {
    let (ours, superseded) = written;
    superseded
        .contains(&cached.resource_version())
        .then(|| Arc::clone(ours))
}

fn object_key(task: &CachedTask) -> String {
    format!(
        "{}/{}",
        task.namespace().unwrap_or_default(),
        task.name_any()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{TaskFields, TaskSpec};

    fn task(rv: &str) -> CachedTask {
        CachedTask::from(live(rv))
    }

    /// A Task as a write returns it.
    fn live(rv: &str) -> Task {
        let mut task = Task::new(
            "t",
            TaskSpec {
                feature_ref: "f".to_owned(),
                fields: TaskFields::default(),
            },
        );
        task.metadata.namespace = Some("ns".to_owned());
        task.metadata.resource_version = Some(rv.to_owned());
        task
    }

    /// The resourceVersion `writes` yields for a cache at `cached`.
    fn newest_rv(writes: &TaskWrites, cached: &str) -> Option<String> {
        writes.newest(Arc::new(task(cached))).resource_version()
    }

    #[test]
    fn a_cache_behind_our_write_yields_what_we_wrote() {
        let writes = TaskWrites::default();
        writes.record(&task("1"), live("2"));
        assert_eq!(newest_rv(&writes, "1").as_deref(), Some("2"));
    }

    /// The resourceVersions `writes` yields for a listing of `cached` (one Task each).
    fn newest_rvs(writes: &TaskWrites, cached: &[&str]) -> Vec<Option<String>> {
        let listed = cached.iter().map(|rv| Arc::new(task(rv))).collect();
        writes
            .newest_of_all(listed)
            .iter()
            .map(|t| t.resource_version())
            .collect()
    }

    #[test]
    fn a_listing_behind_our_write_yields_what_we_wrote_then_the_cache_once_past_it() {
        let writes = TaskWrites::default();
        writes.record(&task("1"), live("2"));
        assert_eq!(newest_rvs(&writes, &["1"]), [Some("2".to_owned())]);
        assert_eq!(newest_rvs(&writes, &["3"]), [Some("3".to_owned())]);
        assert_eq!(newest_rvs(&writes, &["1"]), [Some("1".to_owned())]);
    }

    #[test]
    fn a_cache_past_our_write_yields_the_cache() {
        let writes = TaskWrites::default();
        writes.record(&task("1"), live("2"));
        assert_eq!(newest_rv(&writes, "3").as_deref(), Some("3"));
        assert_eq!(newest_rv(&writes, "1").as_deref(), Some("1"));
    }

    #[test]
    fn a_cache_showing_our_earlier_write_yields_our_latest() {
        let writes = TaskWrites::default();
        writes.record(&task("1"), live("2"));
        writes.record(&task("2"), live("3"));
        assert_eq!(newest_rv(&writes, "2").as_deref(), Some("3"));
        assert_eq!(newest_rv(&writes, "3").as_deref(), Some("3"));
        assert_eq!(newest_rv(&writes, "2").as_deref(), Some("2"));
    }

    #[test]
    fn writes_on_top_of_our_own_write_stay_ahead_of_the_same_stale_cache() {
        let writes = TaskWrites::default();
        writes.record(&task("1"), live("2"));
        writes.record(&task("2"), live("3"));
        assert_eq!(newest_rv(&writes, "1").as_deref(), Some("3"));
    }
}
