//! `uppercase`: the smallest map step. Shows one `#[weir_guest::map]` function that reads
//! each record in place (`RecordRef`) and writes its output straight into the output
//! batch (`Emitter`): no key or value is copied into a `Record` on the way.
//!
//! Each record comes out with its value uppercased (Unicode-aware), its key and event
//! time unchanged; a value that is not UTF-8 is rejected to the dead-letter output.
//! Build: `make guests` (-> build/guests/uppercase.wasm), then name it in a map step.

use weir_guest::{Emitter, RecordRef, Result};

#[weir_guest::map]
fn uppercase(record: RecordRef<'_>, out: &mut Emitter<'_>) -> Result<()> {
    // ASCII, the common case: no UTF-8 check needed (ASCII is UTF-8), uppercased in
    // place by byte loops the compiler vectorises (`+simd128`). Anything else goes
    // through std's Unicode tables. Same result either way.
    if record.value.is_ascii() {
        out.emit_with(record.key, record.timestamp, |value| {
            value.extend_from_slice(record.value);
            value.as_mut_slice().make_ascii_uppercase();
        });
        return Ok(());
    }
    let text = record.value_str()?;
    out.emit(record.key, text.to_uppercase(), record.timestamp);
    Ok(())
}
