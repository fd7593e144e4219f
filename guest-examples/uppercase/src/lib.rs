//! `uppercase`: the smallest map step. Shows one `#[weir_guest::map]` function that reads
//! each record in place (`RecordRef`) and writes its output straight into the output
//! batch (`Emitter`): no key or value is copied into a `Record` on the way.
//!
//! Each record comes out with its value uppercased (Unicode-aware), its key and event
//! time unchanged; a value that is not UTF-8 is rejected to the dead-letter output.
//! Build: `make guests` (-> build/guests/uppercase.wasm), then name it in a map step.

use weir_guest::{Emitter, RecordRef, Result, ascii};

#[weir_guest::map]
fn uppercase(record: RecordRef<'_>, out: &mut Emitter<'_>) -> Result<()> {
    // ASCII, the common case: no UTF-8 check needed (ASCII is UTF-8; checked eight bytes
    // at a time by `weir_guest::ascii`), and each byte mapped on its way into the output
    // batch: `extend` of a slice's bytes reserves once and runs a loop the compiler turns
    // into 16-byte SIMD steps. Anything else goes through std's Unicode tables. Same
    // result either way.
    if ascii::is_ascii(record.value) {
        out.emit_with(record.key, record.timestamp, |value| {
            value.extend(record.value.iter().map(u8::to_ascii_uppercase));
        });
        return Ok(());
    }
    let text = record.value_str()?;
    out.emit(record.key, text.to_uppercase(), record.timestamp);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_guest::Record;

    /// What `uppercase` emits for one record, or its refusal.
    fn mapped(record: Record) -> std::result::Result<Vec<Record>, String> {
        let mut refusal = None;
        let out = Emitter::capture(|out| {
            refusal = uppercase((&record).into(), out).err().map(|e| e.to_string());
        });
        refusal.map_or(Ok(out), Err)
    }

    #[test]
    fn uppercases_the_value_and_keeps_key_and_time() {
        for (value, upper) in [("weir", "WEIR"), ("straße ǆ", "STRASSE Ǆ")] {
            let out = mapped(Record::new("k", value).with_timestamp(3)).expect("mapped");
            assert_eq!(out, [Record::new("k", upper).with_timestamp(3)]);
        }
    }

    #[test]
    fn a_value_that_is_not_utf8_is_refused() {
        assert!(mapped(Record::new("k", vec![0x68, 0xc3])).is_err());
    }
}
