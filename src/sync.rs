//! Locking shared between modules.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks, carrying on after a panic elsewhere: every value behind these locks is a set of
/// counts or a cache that stays meaningful even if an update was cut short.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
