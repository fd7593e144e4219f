//! Each tenant's share of the API's requests in flight: a semaphore per tenant, of
//! `tenant_requests` permits (`api::fairness` holds one for each request it serves).
//!
//! Invariants: one tenant's permits are its own (another tenant's requests never take
//! them); a permit is given back when dropped; a tenant's semaphore is made on its first
//! request and kept for the server's life (one per tenant id seen).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

/// Every tenant's share of requests in flight.
#[derive(Debug)]
pub struct TenantShares {
    per_tenant: usize,
    shares: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl TenantShares {
    /// Requests of one tenant served at once.
    pub fn per_tenant(&self) -> usize {
        self.per_tenant
    }

    /// Shares of `per_tenant` requests at once (at least 1: the config refuses 0).
    pub fn new(per_tenant: usize) -> Self {
        TenantShares {
            per_tenant: per_tenant.max(1),
            shares: Mutex::new(HashMap::new()),
        }
    }

    /// Tenant `tenant`'s share: a permit of it is one request in flight.
    pub fn of(&self, tenant: &str) -> Arc<Semaphore> {
        let mut shares = self.shares.lock().unwrap_or_else(|p| p.into_inner());
        shares
            .entry(tenant.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_tenant)))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_has_its_share_and_another_tenant_its_own() {
        let shares = TenantShares::new(2);
        let a = shares.of("a");
        let held: Vec<_> = (0..2)
            .map(|_| a.clone().try_acquire_owned().expect("within a's share"))
            .collect();
        assert!(shares.of("a").try_acquire_owned().is_err(), "a's third");
        assert!(shares.of("b").try_acquire_owned().is_ok(), "b is not a");
        drop(held);
        assert!(shares.of("a").try_acquire_owned().is_ok(), "given back");
        assert_eq!(TenantShares::new(0).per_tenant, 1);
    }
}
