//! One lifecycle per pipeline: the lock every change of a pipeline holds, so that
//! create, start, stop, savepoint, upgrade and delete of one pipeline never interleave.
//!
//! Invariants:
//! - Two changes of one key never overlap: a change holds the key's `LockGuard` for its
//!   whole effect (the catalog write, the supervisor call, files, Kafka) and reads the
//!   pipeline's row again once it holds it, so it acts on what the last change left,
//!   never on a row read before another change ran.
//! - Keys that differ never wait for each other: the map's own lock is held only to find
//!   or drop an entry, never across a change.
//! - The map holds a key only while a guard of it lives or a change waits for it: the
//!   last guard to go removes its entry, so a server that saw a million pipeline names
//!   holds no lock for those it is not changing.
//! - A guard is `Send` and owned: a change that goes on in a blocking task (a delete's
//!   kill and Kafka reset) takes its guard with it, so a client that goes away does not
//!   release the lock while the change still runs.
//!
//! The same type, keyed by tenant, serves the topic API (one tenant's creates are
//! checked against its quota one at a time, while another tenant's go on) and the check
//! that a new pipeline's own topics are free (`api::pipelines`).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// The lock of one pipeline, by (tenant, pipeline name).
pub type PipelineLock = LockGuard<(String, String)>;

type Entries<K> = Arc<Mutex<HashMap<K, Arc<AsyncMutex<()>>>>>;

/// A lock per key, made on first use and dropped with its last guard.
#[derive(Debug)]
pub struct KeyedLocks<K: Eq + Hash + Clone> {
    entries: Entries<K>,
}

/// Holds one key's lock; dropping it releases the key (and frees its entry when no one
/// else holds or waits for it).
#[derive(Debug)]
pub struct LockGuard<K: Eq + Hash + Clone> {
    guard: Option<OwnedMutexGuard<()>>,
    key: K,
    entries: Entries<K>,
}

fn entries<K>(m: &Mutex<K>) -> MutexGuard<'_, K> {
    // Every critical section here leaves the map whole: a poisoned lock is usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<K: Eq + Hash + Clone> Default for KeyedLocks<K> {
    fn default() -> Self {
        KeyedLocks {
            entries: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

impl<K: Eq + Hash + Clone> KeyedLocks<K> {
    /// The lock of `key`, shared with everyone else holding or waiting for it.
    fn entry(&self, key: &K) -> Arc<AsyncMutex<()>> {
        entries(&self.entries)
            .entry(key.clone())
            .or_default()
            .clone()
    }

    fn guard(&self, key: K, guard: OwnedMutexGuard<()>) -> LockGuard<K> {
        LockGuard {
            guard: Some(guard),
            key,
            entries: self.entries.clone(),
        }
    }

    /// Waits for `key`'s lock (from async code).
    pub async fn hold(&self, key: K) -> LockGuard<K> {
        let guard = self.entry(&key).lock_owned().await;
        self.guard(key, guard)
    }

    /// Waits for `key`'s lock from a blocking thread (never from async code: it
    /// blocks the thread).
    pub fn hold_blocking(&self, key: K) -> LockGuard<K> {
        let guard = self.entry(&key).blocking_lock_owned();
        self.guard(key, guard)
    }

    /// How many keys have an entry (held or waited for).
    pub fn len(&self) -> usize {
        entries(&self.entries).len()
    }

    /// Whether no key is held or waited for.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Eq + Hash + Clone> Drop for LockGuard<K> {
    fn drop(&mut self) {
        // Released first, so the entry's count below is the map's own plus waiters'.
        drop(self.guard.take());
        let mut map = entries(&self.entries);
        // Only the map's reference left: no one holds or waits (a new waiter clones
        // its entry under this same map lock, so it cannot slip in between).
        if map
            .get(&self.key)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn one_key_is_changed_by_one_holder_at_a_time_and_its_entry_goes_with_the_last() {
        let locks = Arc::new(KeyedLocks::<String>::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (locks, inside, most) = (locks.clone(), inside.clone(), most.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let _g = locks.hold_blocking("t/p".to_owned());
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(most.load(Ordering::SeqCst), 1, "two holders at once");
        assert!(locks.is_empty(), "an entry outlived its last guard");
    }

    #[test]
    fn another_key_does_not_wait_for_a_held_one() {
        let locks = KeyedLocks::<&str>::default();
        let _held = locks.hold_blocking("t/a");
        let (done, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let _other = locks.hold_blocking("t/b");
                done.send(()).expect("send");
            });
            rx.recv_timeout(Duration::from_secs(30))
                .expect("t/b waited for t/a");
        });
        assert_eq!(locks.len(), 1, "only the held key keeps an entry");
    }

    #[tokio::test]
    async fn a_guard_moved_into_a_blocking_task_holds_the_key_until_that_task_ends() {
        let locks = Arc::new(KeyedLocks::<&str>::default());
        let guard = locks.hold("t/p").await;
        let (release, released) = std::sync::mpsc::channel::<()>();
        let task = tokio::task::spawn_blocking(move || {
            let _guard = guard;
            released.recv().ok();
        });
        let waiting = {
            let locks = locks.clone();
            tokio::spawn(async move { locks.hold("t/p").await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "the key was free while its task ran"
        );
        release.send(()).expect("send");
        task.await.expect("task");
        drop(
            tokio::time::timeout(Duration::from_secs(30), waiting)
                .await
                .expect("the key was never released")
                .expect("join"),
        );
        assert!(locks.is_empty());
    }
}
