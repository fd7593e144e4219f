//! Tiered code: a large module seen for the first time starts on baseline code (Winch,
//! one pass: a 19 MB Python component compiles in about a quarter of Cranelift's time)
//! and its instances move to optimized code (Cranelift) once a background compile ends.
//!
//! Invariants:
//! - Tiers differ in speed only: both run the same bytes under the same limits, so which
//!   tier ran a call never changes its output.
//! - A module starts on the baseline only where tiering is on (`WasmEngine::tiered`: `weir
//!   run` and hosted workers, not `weir validate` or an upload, which compile optimized
//!   code so a later run finds it), the module is at least [`TIER_UP_MIN_BYTES`], and its
//!   optimized code is not known to be in the cache (`CompiledCache::has_optimized`).
//!   Everything else loads optimized code at once, as without tiering.
//! - The module's current code is replaced under its lock, and the [`TierSignal`] raised
//!   before that lock is released; an instance reads code and tier under the lock, so
//!   one made from baseline code always sees `outdated` once optimized code is there,
//!   and one made after never does.
//! - An outdated instance is replaced by its owner at its next call boundary, as a
//!   recycled one is (`GuestInstance::code_outdated`: one atomic load per batch). Guest
//!   memory never carries meaning across batches, so nothing is lost.
//! - A tier never goes down. An optimized compile that fails (past the compile limits,
//!   say) leaves the module on the baseline with one warning: it runs, slower.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

/// Smallest module that starts on baseline code: below it Cranelift compiles in well
/// under a second on one core (every Rust example is under 1 MiB), and tiering would
/// only add a second compile.
pub const TIER_UP_MIN_BYTES: usize = 4 << 20; // 4 MiB

/// Which compiler produced a module's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum CodeTier {
    /// Winch: fast to compile, slower to run.
    Baseline = 0,
    /// Cranelift: the code every module ends on.
    Optimized = 1,
}

impl CodeTier {
    fn from_u8(value: u8) -> CodeTier {
        if value == CodeTier::Baseline as u8 {
            CodeTier::Baseline
        } else {
            CodeTier::Optimized
        }
    }

    /// The compiler's name, for logs and `weir validate`.
    pub fn compiler(self) -> &'static str {
        match self {
            CodeTier::Baseline => "winch",
            CodeTier::Optimized => "cranelift",
        }
    }
}

/// The tier a module's new instances get. Shared by the module, its clones and every
/// instance made from it; raised once, never lowered.
#[derive(Debug, Clone)]
pub(crate) struct TierSignal(Arc<AtomicU8>);

impl TierSignal {
    pub(crate) fn new(tier: CodeTier) -> TierSignal {
        TierSignal(Arc::new(AtomicU8::new(tier as u8)))
    }

    pub(crate) fn get(&self) -> CodeTier {
        CodeTier::from_u8(self.0.load(Ordering::Acquire))
    }

    /// Raises the tier to `tier` (never lowers it).
    pub(crate) fn raise(&self, tier: CodeTier) {
        self.0.fetch_max(tier as u8, Ordering::Release);
    }
}

/// An instance's view of its code: the tier it was made from and its module's signal.
#[derive(Debug, Clone)]
pub(crate) struct InstanceTier {
    made_from: CodeTier,
    module: TierSignal,
}

impl InstanceTier {
    pub(crate) fn new(made_from: CodeTier, module: TierSignal) -> InstanceTier {
        InstanceTier { made_from, module }
    }

    /// Whether the module now has faster code than this instance runs.
    pub(crate) fn outdated(&self) -> bool {
        self.module.get() > self.made_from
    }

    #[cfg(test)]
    pub(crate) fn made_from(&self) -> CodeTier {
        self.made_from
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_is_outdated_only_once_its_module_has_faster_code() {
        let module = TierSignal::new(CodeTier::Baseline);
        let early = InstanceTier::new(CodeTier::Baseline, module.clone());
        assert!(!early.outdated());
        module.raise(CodeTier::Optimized);
        assert!(early.outdated());
        let late = InstanceTier::new(module.get(), module.clone());
        assert_eq!(late.made_from(), CodeTier::Optimized);
        assert!(!late.outdated());
        module.raise(CodeTier::Baseline);
        assert_eq!(module.get(), CodeTier::Optimized, "a tier never goes down");
    }
}
