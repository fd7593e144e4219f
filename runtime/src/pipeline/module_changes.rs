//! Which steps run another module than the checkpoint a run resumes from was taken with.
//!
//! Invariants:
//! - Every checkpoint records, per step, the SHA-256 of the module it ran
//!   (`CheckpointMetadata::modules`, written by the coordinator from
//!   [`module_hashes`]); a step absent there (a checkpoint from before the record, or a
//!   step added since) is never reported as changed.
//! - A change is said, never refused: resuming with a new module and its old state is
//!   an upgrade Weir allows (the server's module upgrade relies on it). What is said is
//!   one line per changed step naming the step, the module, both hashes and what to do
//!   to process the input again with the new one (`--from-scratch`).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::checkpoint::metadata::CheckpointMetadata;
use crate::engine::GuestModule;
use crate::record::ids::step_id;

/// Step id -> hex SHA-256 of the module it runs.
pub fn module_hashes(modules: &BTreeMap<usize, Arc<GuestModule>>) -> BTreeMap<String, String> {
    modules
        .iter()
        .map(|(&n, module)| (step_id(n), module.sha256_hex().to_owned()))
        .collect()
}

/// A step whose module is not the one its restored checkpoint was taken with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleChange {
    pub step: String,
    /// The module's name now (its file name).
    pub module: String,
    /// Hex SHA-256 of the module the checkpoint was taken with, and of the one now.
    pub was: String,
    pub now: String,
    pub checkpoint: crate::record::CheckpointId,
    /// The checkpoint is a finished run's last: nothing is left to read with the new one.
    pub finished: bool,
}

/// The steps of `modules` that ran another module in `restored`.
pub fn module_changes(
    restored: &CheckpointMetadata,
    modules: &BTreeMap<usize, Arc<GuestModule>>,
) -> Vec<ModuleChange> {
    modules
        .iter()
        .filter_map(|(&n, module)| {
            let step = step_id(n);
            let was = restored.modules.get(&step)?;
            (was != module.sha256_hex()).then(|| ModuleChange {
                step,
                module: module.name().to_owned(),
                was: was.clone(),
                now: module.sha256_hex().to_owned(),
                checkpoint: restored.id,
                finished: restored.is_final,
            })
        })
        .collect()
}

/// The first 12 hex digits of a SHA-256, as `weir module ls` shows ids.
fn short(sha256: &str) -> &str {
    sha256.get(..12).unwrap_or(sha256)
}

impl ModuleChange {
    /// A note for a guest failure of this step: whose state it read.
    pub fn state_note(&self) -> String {
        format!(
            " (this step's state was written by module {} and is read now by {}: if the accumulator's type changed, rerun with --from-scratch)",
            short(&self.was),
            short(&self.now)
        )
    }
}

impl fmt::Display for ModuleChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} runs {} ({}), not the module checkpoint {} was taken with ({}): ",
            self.step,
            self.module,
            short(&self.now),
            self.checkpoint,
            short(&self.was)
        )?;
        if self.finished {
            write!(
                f,
                "that checkpoint ended the run, so nothing is left to read; rerun with --from-scratch to process the input again with the new module"
            )
        } else {
            write!(
                f,
                "resuming with the new module and the old state; rerun with --from-scratch to process the input again from the start"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::WasmEngine;
    use crate::test_support::guest_path;

    fn modules(engine: &WasmEngine, names: &[&str]) -> BTreeMap<usize, Arc<GuestModule>> {
        names
            .iter()
            .enumerate()
            .map(|(n, name)| (n, Arc::new(engine.load(&guest_path(name)).expect("load"))))
            .collect()
    }

    #[test]
    fn a_changed_step_is_named_with_both_hashes_and_an_unknown_one_is_not() {
        let engine = WasmEngine::new(None).expect("engine");
        let before = modules(&engine, &["uppercase", "filter_json"]);
        let mut restored = CheckpointMetadata::empty_for_test("p", 7);
        restored.modules = module_hashes(&before);
        assert!(module_changes(&restored, &before).is_empty());

        let after = modules(&engine, &["split_words", "filter_json", "uppercase"]);
        let changes = module_changes(&restored, &after);
        assert_eq!(
            changes.len(),
            1,
            "step-2 is new, step-1 unchanged: {changes:?}"
        );
        let change = &changes[0];
        assert_eq!(change.step, "step-0");
        assert_eq!(change.module, "split_words.wasm");
        let (was, now) = (
            &before[&0].sha256_hex()[..12],
            &after[&0].sha256_hex()[..12],
        );
        assert_eq!(
            change.to_string(),
            format!(
                "step-0 runs split_words.wasm ({now}), not the module checkpoint 7 was taken with ({was}): resuming with the new module and the old state; rerun with --from-scratch to process the input again from the start"
            )
        );
        assert_eq!(
            change.state_note(),
            format!(
                " (this step's state was written by module {was} and is read now by {now}: if the accumulator's type changed, rerun with --from-scratch)"
            )
        );
        restored.is_final = true;
        assert!(
            module_changes(&restored, &after)[0]
                .to_string()
                .contains("nothing is left to read")
        );
        restored.modules.clear();
        assert!(
            module_changes(&restored, &after).is_empty(),
            "an old checkpoint says nothing"
        );
    }
}
