//! `fs-importer`: a hostile guest for the capability check at load time.
//!
//! Reads `/etc/hostname` with `std::fs` for every record, so the component imports
//! `wasi:filesystem/types` and `wasi:filesystem/preopens`, which the runtime does not
//! grant: it must refuse this component when loading it, naming those imports, before
//! any record flows. (Were it ever instantiated, it would pass records through
//! unchanged: with no preopened directory the read fails, and the error is ignored.)
//! Built by `make guests` -> build/guests/fs_importer.wasm.

use weir_guest::{Record, Result};

#[weir_guest::map]
fn fs_importer(record: Record) -> Result<Record> {
    let hostname = std::fs::read_to_string("/etc/hostname");
    std::hint::black_box(&hostname);
    Ok(record)
}
