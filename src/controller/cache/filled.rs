//! Whether each cache has been filled by its first list, for any number of waiters.
//!
//! kube's `Store::wait_until_ready` keeps one waker: of several waiters only the one that
//! polled last is woken, and a `now_or_never` check in between leaves none woken. So the
//! controller keeps its own signal, set as the first list's end passes into the cache.

use tokio::sync::watch;

/// Sets a cache's [`Filled`] once its first list is in.
pub(crate) struct FilledSignal(watch::Sender<bool>);

/// Whether a cache has been filled; cheap to clone, any number may wait.
#[derive(Clone, Debug)]
pub struct Filled(watch::Receiver<bool>);

/// A signal and its reader, not filled yet.
pub(crate) fn filled() -> (FilledSignal, Filled) {
    let (sender, receiver) = watch::channel(false);
    (FilledSignal(sender), Filled(receiver))
}

impl FilledSignal {
    /// Marks the cache filled (for good: a re-list keeps serving the cache it replaces).
    pub(crate) fn mark(&self) {
        self.0
            .send_if_modified(|filled| !std::mem::replace(filled, true));
    }
}

impl Filled {
    /// True once the cache has been filled.
    pub fn is_filled(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes once the cache is filled: true, or false when its watch is gone first.
    pub async fn wait(&self) -> bool {
        self.0.clone().wait_for(|filled| *filled).await.is_ok()
    }
}

/// The filled signals of the caches a reconcile reads.
#[derive(Clone, Debug)]
pub struct CachesFilled {
    /// The Task cache.
    pub tasks: Filled,
    /// The agent Pod cache.
    pub pods: Filled,
    /// The claim Lease cache.
    pub leases: Filled,
}

impl CachesFilled {
    /// True when every cache has been filled.
    pub fn all(&self) -> bool {
        [&self.tasks, &self.pods, &self.leases]
            .iter()
            .all(|filled| filled.is_filled())
    }

    /// Completes once every cache is filled: true, or false when a watch is gone first.
    pub async fn wait_all(&self) -> bool {
        self.tasks.wait().await && self.pods.wait().await && self.leases.wait().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_waiter_is_woken_when_the_cache_is_filled() {
        let (signal, filled) = filled();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let filled = filled.clone();
                tokio::spawn(async move { filled.wait().await })
            })
            .collect();
        tokio::task::yield_now().await;

        signal.mark();

        for waiter in waiters {
            assert!(waiter.await.expect("waiter"));
        }
    }

    #[tokio::test]
    async fn a_check_in_between_leaves_a_waiter_woken() {
        let (signal, filled) = filled();
        let waiter = tokio::spawn({
            let filled = filled.clone();
            async move { filled.wait().await }
        });
        tokio::task::yield_now().await;
        assert!(!filled.is_filled());

        signal.mark();

        assert!(waiter.await.expect("waiter"));
        assert!(filled.is_filled());
    }

    #[tokio::test]
    async fn a_cache_whose_watch_is_gone_is_never_filled() {
        let (signal, filled) = filled();

        drop(signal);

        assert!(!filled.wait().await);
    }
}
