//! Admission of module uploads: what an upload must hold before the store compiles
//! and admits it. The tenant's module byte quota is *reserved* for it, and it waits for
//! a compile slot.
//!
//! Invariants:
//! - A tenant's stored module bytes plus its reservations never exceed its quota: a
//!   reservation is taken under one lock that reads both (`reserve`), and released only
//!   after the module is in the catalog (or refused), so concurrent uploads can never
//!   pass the quota together, whatever their number.
//! - At most `slots` compiles run on the server at once, and at most `per_tenant` of
//!   one tenant's: an upload waits for its tenant's slot first, then for a server slot,
//!   so one tenant's burst queues behind itself and never holds every server slot.
//!   (A compile costs up to the server's compile limits in CPU and memory.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::server::error::{ApiError, ServerError};
use crate::server::module_store::over_quota;

/// `[compiles]` of the server config.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompilesConfig {
    /// Compiles the server runs at once (default: half the CPUs, at least 1).
    pub slots: usize,
    /// Compiles one tenant runs at once (default 1).
    pub per_tenant: usize,
}

impl Default for CompilesConfig {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        CompilesConfig {
            slots: (cpus / 2).max(1),
            per_tenant: 1,
        }
    }
}

/// Reserved bytes by tenant.
type Reserved = Arc<Mutex<HashMap<String, u64>>>;

/// The reservations and compile slots of one server.
#[derive(Debug)]
pub struct Admission {
    reserved: Reserved,
    slots: Arc<Semaphore>,
    per_tenant: usize,
    tenant_slots: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Bytes of a tenant's quota held for one upload; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    reserved: Reserved,
    tenant: String,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut reserved = lock(&self.reserved);
        if let Some(held) = reserved.get_mut(&self.tenant) {
            *held = held.saturating_sub(self.bytes);
            if *held == 0 {
                reserved.remove(&self.tenant);
            }
        }
    }
}

/// A compile slot (the tenant's and the server's); given back when dropped.
#[derive(Debug)]
pub struct CompileSlot {
    _tenant: OwnedSemaphorePermit,
    _server: OwnedSemaphorePermit,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Admission {
    pub fn new(config: &CompilesConfig) -> Admission {
        Admission {
            reserved: Reserved::default(),
            slots: Arc::new(Semaphore::new(config.slots.max(1))),
            per_tenant: config.per_tenant.max(1),
            tenant_slots: Mutex::default(),
        }
    }

    /// Bytes of `tenant`'s quota reserved by uploads in progress.
    pub fn reserved(&self, tenant: &str) -> u64 {
        lock(&self.reserved).get(tenant).copied().unwrap_or(0)
    }

    /// Reserves `bytes` of `tenant`'s `quota`, of which `stored()` bytes are stored
    /// modules; refused (413, saying what is left) if they do not fit.
    pub fn reserve(
        &self,
        tenant: &str,
        bytes: u64,
        quota: u64,
        stored: impl FnOnce() -> Result<u64, ServerError>,
    ) -> Result<Reservation, ApiError> {
        let mut reserved = lock(&self.reserved);
        let held = reserved.get(tenant).copied().unwrap_or(0);
        let left = quota.saturating_sub(stored()?.saturating_add(held));
        if bytes > left {
            return Err(over_quota(left));
        }
        *reserved.entry(tenant.to_owned()).or_default() += bytes;
        Ok(Reservation {
            reserved: self.reserved.clone(),
            tenant: tenant.to_owned(),
            bytes,
        })
    }

    /// Waits for a compile slot of `tenant`'s, then for one of the server's.
    pub async fn compile_slot(&self, tenant: &str) -> CompileSlot {
        let mine = lock(&self.tenant_slots)
            .entry(tenant.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_tenant)))
            .clone();
        // Never closed: acquiring fails only on a closed semaphore.
        let tenant_permit = mine.acquire_owned().await.expect("an open semaphore");
        let server_permit = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("an open semaphore");
        CompileSlot {
            _tenant: tenant_permit,
            _server: server_permit,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn concurrent_reservations_never_pass_the_quota_together() {
        let admission = Arc::new(Admission::new(&CompilesConfig::default()));
        let (quota, stored, upload) = (100, 30, 20);
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let admission = admission.clone();
                std::thread::spawn(move || {
                    admission
                        .reserve("t", upload, quota, || Ok(stored))
                        .ok()
                        .inspect(|_| std::thread::sleep(Duration::from_millis(50)))
                })
            })
            .collect();
        let held: Vec<Reservation> = threads
            .into_iter()
            .filter_map(|t| t.join().expect("thread"))
            .collect();
        // 70 bytes left: 3 uploads of 20 fit, whatever the interleaving.
        assert_eq!(held.len(), 3);
        assert_eq!(admission.reserved("t"), 60);
        assert_eq!(admission.reserved("other"), 0);
        drop(held);
        assert_eq!(admission.reserved("t"), 0, "given back");
        let refused = admission
            .reserve("t", 71, quota, || Ok(stored))
            .expect_err("over what is left");
        assert!(
            format!("{refused:?}").contains("70 bytes left"),
            "{refused:?}"
        );
    }

    #[tokio::test]
    async fn a_tenant_compiles_one_at_a_time_and_leaves_server_slots_to_others() {
        let admission = Arc::new(Admission::new(&CompilesConfig {
            slots: 2,
            per_tenant: 1,
        }));
        let a = admission.compile_slot("a").await;
        // a's second compile waits for its first, and holds no server slot meanwhile.
        let waiting = {
            let admission = admission.clone();
            tokio::spawn(async move { admission.compile_slot("a").await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        let b = tokio::time::timeout(Duration::from_secs(5), admission.compile_slot("b"))
            .await
            .expect("b gets the second server slot");
        drop(a);
        let a_again = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("a's second compile starts once its first ended")
            .expect("task");
        drop((a_again, b));
    }
}
