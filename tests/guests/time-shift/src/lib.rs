//! `time-shift`: a map that moves every record's event time back by 3 s
//! (`SHIFT_MS`), key and value unchanged. Records read at Kafka timestamps of a few
//! seconds after the epoch come out at event times around zero, on both sides of it:
//! the repartition test's way to put event times at or below zero, which no Kafka
//! timestamp can carry, in front of a keyed step.

use weir_guest::{Emitter, RecordRef, Result};

/// How far back every record's event time moves, in ms.
const SHIFT_MS: i64 = 3_000;

#[weir_guest::map]
fn time_shift(record: RecordRef<'_>, out: &mut Emitter<'_>) -> Result<()> {
    out.emit_with(record.key, record.timestamp - SHIFT_MS, |value| {
        value.extend_from_slice(record.value);
    });
    Ok(())
}
