//! Guest memory per step: the linear memory of every guest instance, sampled by its
//! operator after each call and at each instantiation.
//!
//! Invariants:
//! - One gauge per operator (one per step per subtask); it holds the linear memory of
//!   the instance that operator runs now, in bytes (all its memories summed, as the
//!   memory limit counts them), or 0 while it has none (before the first batch, after a
//!   trap dropped it).
//! - A step's figure is the largest of its gauges, which is what compares with
//!   `[limits] memory` (the limit is per instance), and their sum, which is what the
//!   step costs the host. Wasm memories never shrink, so a gauge only grows while its
//!   instance lives: a guest whose figure keeps rising between calls is leaking.
//! - Each gauge also counts the instances its operator recycled (replaced by a fresh
//!   one because it had used half its memory headroom, see `engine/guest_store.rs`);
//!   a step's count is the sum. A recycled instance's last sample stays in the gauge
//!   until the fresh instance's first call replaces it.
//! - Sampling is one relaxed store per call; reading takes a lock only to walk the
//!   list of gauges, which grows only when an operator is built.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The gauges of one pipeline run, by step.
#[derive(Debug, Default)]
pub struct GuestMemory {
    gauges: Mutex<Vec<(String, Arc<Cells>)>>,
}

#[derive(Debug, Default)]
struct Cells {
    bytes: AtomicU64,
    recycled: AtomicU64,
}

/// One operator's gauge: the linear memory of the instance it runs now, and how many
/// instances it recycled.
#[derive(Debug, Clone, Default)]
pub struct GuestMemoryGauge(Arc<Cells>);

impl GuestMemoryGauge {
    /// A gauge that belongs to no pipeline's figures (an operator built alone).
    pub fn detached() -> Self {
        Self::default()
    }

    pub fn set(&self, bytes: usize) {
        self.0.bytes.store(bytes as u64, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.bytes.load(Ordering::Relaxed)
    }

    /// Counts one recycled instance.
    pub fn recycled(&self) {
        self.0.recycled.fetch_add(1, Ordering::Relaxed);
    }

    pub fn recycled_count(&self) -> u64 {
        self.0.recycled.load(Ordering::Relaxed)
    }
}

/// One step's guest memory, over its instances.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepGuestMemory {
    /// Operators of the step that run an instance now.
    pub instances: u64,
    /// The largest instance's linear memory, bytes.
    pub max_bytes: u64,
    /// All instances' linear memory together, bytes.
    pub total_bytes: u64,
    /// Instances recycled so far (see the module's invariants).
    #[serde(default)]
    pub recycled: u64,
}

impl GuestMemory {
    /// A new gauge of `step`, counted in its figures from now on.
    pub fn gauge(&self, step: &str) -> GuestMemoryGauge {
        let gauge = GuestMemoryGauge::default();
        self.lock().push((step.to_owned(), gauge.0.clone()));
        gauge
    }

    /// Each step's figures, by step name.
    pub fn by_step(&self) -> BTreeMap<String, StepGuestMemory> {
        let mut steps = BTreeMap::<String, StepGuestMemory>::new();
        for (step, cells) in self.lock().iter() {
            let bytes = cells.bytes.load(Ordering::Relaxed);
            let figures = steps.entry(step.clone()).or_default();
            if bytes > 0 {
                figures.instances += 1;
            }
            figures.max_bytes = figures.max_bytes.max(bytes);
            figures.total_bytes = figures.total_bytes.saturating_add(bytes);
            figures.recycled += cells.recycled.load(Ordering::Relaxed);
        }
        steps
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, Arc<Cells>)>> {
        // A poisoned list of gauges is still a list of gauges.
        self.gauges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_its_largest_instance_and_their_sum() {
        let memory = GuestMemory::default();
        let a = memory.gauge("step-0");
        let b = memory.gauge("step-0");
        let c = memory.gauge("step-1");
        a.set(3 << 20);
        b.set(5 << 20);
        b.recycled();
        let steps = memory.by_step();
        assert_eq!(
            steps["step-0"],
            StepGuestMemory {
                instances: 2,
                max_bytes: 5 << 20,
                total_bytes: 8 << 20,
                recycled: 1,
            }
        );
        assert_eq!(steps["step-1"], StepGuestMemory::default());
        c.set(1 << 16);
        b.set(0); // its instance trapped and was dropped
        let steps = memory.by_step();
        assert_eq!(steps["step-0"].instances, 1);
        assert_eq!(steps["step-0"].max_bytes, 3 << 20);
        assert_eq!(steps["step-1"].max_bytes, 1 << 16);
    }

    #[test]
    fn a_detached_gauge_counts_nowhere() {
        let memory = GuestMemory::default();
        GuestMemoryGauge::detached().set(1 << 20);
        assert!(memory.by_step().is_empty());
    }
}
