//! How much one guest call may hand back to the host, and the checks that enforce it.
//!
//! Invariants:
//! - Every datum a guest passes to the host, a call's whole result included, is copied
//!   under wasmtime's hostcall fuel, set to [`MAX_GUEST_TRANSFER_BYTES`] per store:
//!   no call result and no host-call argument exceeds it (the copy traps first, and
//!   `guest_store.rs` reports that as `EngineError::TransferLimit`).
//! - Each input record is rejected at most once: a rejection index that is out of range
//!   or repeated is malformed output ([`check_rejections`]). So dead letters never
//!   outnumber input records, whatever the guest returns.
//! - Records and bytes out per call are bounded by a multiple of the input
//!   ([`check_output_size`]), with a floor so a small batch may still grow (one line split
//!   into words): one record cannot become a million records, or gigabytes downstream.
//! - Checks are O(output) and never panic on any guest output.

use super::bindings::wit_types;

/// Hostcall fuel: the most bytes a guest may pass to the host in one host call or one
/// call result (wasmtime's own default; docs/src/guarantees.md and the error state it).
pub(crate) const MAX_GUEST_TRANSFER_BYTES: usize = 128 << 20; // 128 MiB

/// Output records a call may return per input record (a flat-map fans out this far).
pub(crate) const MAX_OUTPUT_RECORDS_PER_INPUT: usize = 64;
/// Output records any call may return whatever its input: a batch of one long line
/// may still become many words.
pub(crate) const MIN_OUTPUT_RECORDS_LIMIT: usize = 65_536;
/// Output bytes (keys, values and rejection reasons) a call may return per input byte.
pub(crate) const MAX_OUTPUT_BYTES_PER_INPUT_BYTE: usize = 16;
/// Output bytes any call may return whatever its input (counters, small records).
pub(crate) const MIN_OUTPUT_BYTES_LIMIT: usize = 16 << 20; // 16 MiB

/// One input record the guest refused; the runtime routes it to the dead-letter output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Position of the record in the input batch (for `update`: in `groups.records`).
    pub index: u32,
    pub reason: String,
}

impl From<wit_types::Rejection> for Rejection {
    fn from(r: wit_types::Rejection) -> Self {
        Rejection {
            index: r.index,
            reason: r.reason,
        }
    }
}

/// Every rejection must point into the input, and at a record not rejected before.
pub(crate) fn check_rejections(rejections: &[Rejection], input_len: usize) -> Result<(), String> {
    let mut seen = vec![false; input_len];
    for r in rejections {
        let index = r.index as usize;
        match seen.get_mut(index) {
            None => {
                return Err(format!(
                    "rejection index {} is out of range for an input of {input_len} records",
                    r.index
                ));
            }
            Some(true) => {
                return Err(format!(
                    "rejection index {} appears more than once; each input record can be rejected at most once",
                    r.index
                ));
            }
            Some(seen) => *seen = true,
        }
    }
    Ok(())
}

/// Bytes of the rejections' reasons.
pub(crate) fn reason_bytes(rejections: &[Rejection]) -> usize {
    rejections
        .iter()
        .fold(0, |sum: usize, r| sum.saturating_add(r.reason.len()))
}

/// `records_out` records and `bytes_out` bytes (keys, values, accumulators, rejection
/// reasons) returned for an input of `input_len` records and `input_bytes` bytes must
/// stay within the per-call bounds.
pub(crate) fn check_output_size(
    records_out: usize,
    bytes_out: usize,
    input_len: usize,
    input_bytes: usize,
) -> Result<(), String> {
    within(
        records_out,
        "records",
        input_len,
        "input record",
        MAX_OUTPUT_RECORDS_PER_INPUT,
        MIN_OUTPUT_RECORDS_LIMIT,
    )?;
    within(
        bytes_out,
        "bytes",
        input_bytes,
        "input byte",
        MAX_OUTPUT_BYTES_PER_INPUT_BYTE,
        MIN_OUTPUT_BYTES_LIMIT,
    )
}

/// `out` (of `unit`) within `per_input` times `input`, and never below `floor`.
fn within(
    out: usize,
    unit: &str,
    input: usize,
    input_unit: &str,
    per_input: usize,
    floor: usize,
) -> Result<(), String> {
    let max = input.saturating_mul(per_input).max(floor);
    if out > max {
        return Err(format!(
            "{out} {unit} for an input of {input}; a call may return at most {max} \
             ({per_input} per {input_unit}, at least {floor})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rej(index: u32) -> Rejection {
        Rejection {
            index,
            reason: String::new(),
        }
    }

    #[test]
    fn rejections_are_in_range_and_unique() {
        assert_eq!(check_rejections(&[rej(1), rej(0)], 2), Ok(()));
        assert_eq!(
            check_rejections(&[rej(0), rej(1), rej(0)], 2),
            Err("rejection index 0 appears more than once; each input record can be rejected at most once".into())
        );
        assert_eq!(
            check_rejections(&[rej(2)], 2),
            Err("rejection index 2 is out of range for an input of 2 records".into())
        );
    }

    #[test]
    fn output_is_bounded_by_a_multiple_of_the_input_with_a_floor() {
        assert_eq!(check_output_size(1, 1, 1, 1), Ok(()));
        let limit = MIN_OUTPUT_RECORDS_LIMIT;
        assert_eq!(
            check_output_size(limit + 1, 0, 1, 1),
            Err(
                "65537 records for an input of 1; a call may return at most 65536 \
                 (64 per input record, at least 65536)"
                    .into()
            )
        );
        assert_eq!(check_output_size(limit + 1, 0, 1025, 1), Ok(()));
        assert_eq!(
            check_output_size(1, MIN_OUTPUT_BYTES_LIMIT + 1, 1, 1),
            Err(
                "16777217 bytes for an input of 1; a call may return at most 16777216 \
                 (16 per input byte, at least 16777216)"
                    .into()
            )
        );
        assert_eq!(check_output_size(1, 32 << 20, 1, 2 << 20), Ok(()));
        assert_eq!(
            reason_bytes(&[
                rej(0),
                Rejection {
                    index: 1,
                    reason: "ab".into()
                }
            ]),
            2
        );
    }
}
