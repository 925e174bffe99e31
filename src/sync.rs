//! Locking shared state that a panicked holder may have poisoned: the data is still the
//! best there is, so it is used as it is.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, recovering the guard of a poisoned lock.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
