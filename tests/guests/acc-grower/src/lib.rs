//! `acc-grower`: a hostile aggregate for the host-memory tests (issue 7 §2).
//!
//! Its accumulator is a string that grows by `grow_bytes` bytes (step config; default
//! 1024) with every record of its key, without bound: the runtime must bound what it
//! caches (`cache_bytes`) and refuse an accumulator past `max_accumulator_bytes` with an
//! error naming the module and key. Emits `<key>=<accumulator length>` per key.
//! Built by `make guests` -> build/guests/acc_grower.wasm.

use std::sync::LazyLock;

use weir_guest::{Record, Window};

/// Bytes added to a key's accumulator per record.
static GROW_BYTES: LazyLock<usize> = LazyLock::new(|| {
    weir_guest::config_or("grow_bytes", "1024")
        .parse()
        .unwrap_or(1024)
});

#[weir_guest::aggregate(emit = emit_length)]
fn grow(acc: &mut String, _record: &Record) {
    acc.extend(std::iter::repeat_n('x', *GROW_BYTES));
}

fn emit_length(key: &[u8], _window: Option<Window>, acc: &String) -> Record {
    let value = format!("{}={}", String::from_utf8_lossy(key), acc.len());
    Record::new(key, value)
}
