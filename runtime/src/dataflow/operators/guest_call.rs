//! What both guest operators (`map`, `aggregate`) do around a guest call: the error that
//! names the records a failed call held (`GuestCallError`, keys shown by `display_key`),
//! whose memory a memory-limit failure was (`memory_note`), the bound on records that
//! may fail alone before the step fails (`MAX_FAILED_ALONE`, `fail_alone`), and the
//! instance's memory sampled and recycled after each call (`sample_and_recycle`).

use crate::dataflow::operators::OnError;
use crate::engine::{EngineError, GuestInstance};
use crate::metrics::guest_memory::GuestMemoryGauge;

/// Bytes of a key shown in an error before it is cut ("..." and the full length follow).
const KEY_SHOWN_BYTES: usize = 64;

/// Records of one batch that may fail alone under `on_error = "dead-letter"` before the
/// step fails: a guest failing on everything is a bug, not bad records.
pub const MAX_FAILED_ALONE: usize = 16;

/// What a refused record's reason ends with when its second call failed too.
pub const SECOND_CALL_NOTE: &str = " (the second call, in a fresh instance)";

/// Whether a call over one record that failed with `error`, in a step whose records
/// fail as `on_error` says, is made once more in a fresh instance before the record is
/// refused: under `"dead-letter"`, when it ran out of its deadline, which is
/// wall-clock and which a starved or paused host can spend with the guest barely run.
/// Says so in the log when it is.
pub fn calls_again(step: &str, error: &EngineError, on_error: OnError) -> bool {
    let again = on_error == OnError::DeadLetter && matches!(error, EngineError::CpuDeadline { .. });
    if again {
        tracing::warn!(step, %error,
            "a guest call over one record ran out of its deadline: calling it once more in a fresh instance");
    }
    again
}

/// A guest call failed; says which records were being processed.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}{note}", self.which())]
pub struct GuestCallError {
    pub module: String,
    pub first: u64,
    pub end: u64,
    /// The key of the one record the call was given, when it was one.
    pub key: Option<Vec<u8>>,
    #[source]
    pub source: EngineError,
    /// Whose memory it was, for a memory-limit error (see [`memory_note`]); else empty.
    pub note: String,
}

impl GuestCallError {
    fn which(&self) -> String {
        match &self.key {
            Some(key) if self.end == self.first + 1 && key.is_empty() => {
                format!("on input record {} of this subtask", self.first)
            }
            Some(key) if self.end == self.first + 1 => format!(
                "on input record {} (key {}) of this subtask",
                self.first,
                display_key(key)
            ),
            _ => format!(
                "on input records {}..{} of this subtask",
                self.first, self.end
            ),
        }
    }
}

/// For a guest that hit its memory limit, says whether the runtime's input alone was the
/// problem: the input of a call is copied into the guest's memory whole and its output
/// is built there too, so an input over half the limit cannot be processed by any
/// guest, while a smaller one means the guest itself used the memory.
pub fn memory_note(source: &EngineError, input_bytes: usize) -> String {
    let EngineError::MemoryLimit { limit_bytes, .. } = source else {
        return String::new();
    };
    if input_bytes.saturating_mul(2) > *limit_bytes {
        format!(
            " (the runtime's input to this call, {input_bytes} bytes, is more than half of it: \
             lower batch_bytes or batch_size, or raise [limits] memory)"
        )
    } else {
        format!(
            " (the runtime's input to this call was only {input_bytes} bytes: the guest used the rest: raise [limits] memory if it needs more)"
        )
    }
}

/// After a guest call: samples `instance`'s linear memory into `memory` (0 without an
/// instance), and drops the instance if it used half its memory headroom (its owner
/// instantiates a fresh one at its next call; counted in `memory`), or if its module now
/// has faster code (not counted: see `code_tier.rs`).
pub fn sample_and_recycle<T: GuestInstance>(
    id: &str,
    instance: &mut Option<T>,
    memory: &GuestMemoryGauge,
) {
    memory.set(instance.as_ref().map_or(0, T::memory_bytes));
    if let Some(old) = instance.take_if(|i| i.wants_recycling()) {
        tracing::debug!(
            operator = id,
            module = old.module_name(),
            memory_bytes = old.memory_bytes(),
            "recycling a guest instance that used half its memory headroom"
        );
        memory.recycled();
    } else if let Some(old) = instance.take_if(|i| i.code_outdated()) {
        tracing::debug!(
            operator = id,
            module = old.module_name(),
            "moving a guest instance to its module's optimized code"
        );
    }
}

/// The error a step fails with after its records were retried alone: the record's own,
/// and, past [`MAX_FAILED_ALONE`], saying so.
pub fn fail_alone(mut error: GuestCallError, failed: usize) -> GuestCallError {
    if failed > MAX_FAILED_ALONE {
        error.note.push_str(&format!(
            " (more than {MAX_FAILED_ALONE} records of one batch failed alone: the guest fails on everything, not on a few bad records)"
        ));
    }
    error
}

/// A record key for an error message: quoted, every byte outside printable ASCII
/// escaped (`\n`, `\xff`), cut after [`KEY_SHOWN_BYTES`] bytes with the full length.
pub fn display_key(key: &[u8]) -> String {
    let shown = &key[..key.len().min(KEY_SHOWN_BYTES)];
    // `escape_ascii` also escapes `"` and `\\`, so the quotes below are unambiguous.
    let escaped = shown.escape_ascii().to_string();
    if key.len() > KEY_SHOWN_BYTES {
        format!("\"{escaped}\"... ({} bytes)", key.len())
    } else {
        format!("\"{escaped}\"")
    }
}
