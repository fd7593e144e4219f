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
    let text = record.value_str()?;
    out.emit_with(record.key, record.timestamp, |value| {
        // ASCII, the common case, in place with byte loops the compiler vectorises
        // (`+simd128`); anything else through std's Unicode tables. Same result.
        if text.is_ascii() {
            value.extend_from_slice(text.as_bytes());
            value.as_mut_slice().make_ascii_uppercase();
        } else {
            value.push_str(&text.to_uppercase());
        }
    });
    Ok(())
}
