//! `uppercase`: the smallest map step. Shows one `#[weir_guest::map]` function.
//!
//! Each record comes out with its value uppercased (Unicode-aware), its key and event
//! time unchanged; a value that is not UTF-8 is rejected to the dead-letter output.
//! Build: `make guests` (-> build/guests/uppercase.wasm), then name it in a map step.

use weir_guest::{Record, Result};

#[weir_guest::map]
fn uppercase(mut record: Record) -> Result<Record> {
    record.value = record.value_str()?.to_uppercase().into_bytes();
    Ok(record)
}
