//! `sandbox-probe`: a hostile guest for the deny-by-default WASI sandbox.
//!
//! Its component imports the rest of WASI 0.2 (`wasi:filesystem/*`, `wasi:sockets/*`,
//! `wasi:cli/environment`), which the runtime links but grants nothing through. For
//! each record it runs the probe its value names and emits one record saying what it
//! got, `<probe>: denied: <error kind>` or `<probe>: GOT ...` (a hole in the sandbox):
//!
//! - `read /etc/passwd`, `read hostname` (a relative path): `std::fs::read`;
//! - `readdir /`, `readdir .`: `std::fs::read_dir`;
//! - `write /tmp/weir-sandbox-probe`: `std::fs::write`;
//! - `env`: `std::env::vars()` (`empty` when there is none); `home`:
//!   `std::env::var("HOME")`; `args`: `std::env::args()`; `stdin`: read stdin to its end;
//! - `tcp <addr>`: `std::net::TcpStream::connect`; `udp <addr>`: bind a UDP socket
//!   and `send_to`; `dns <name:port>`: `ToSocketAddrs` (a name lookup).
//!
//! Any other value passes through unchanged. The tests run it through `weir run` and
//! assert every probe's exact line. Built by `make guests` -> build/guests/sandbox_probe.wasm.

use std::io::ErrorKind;
use std::net::{TcpStream, ToSocketAddrs, UdpSocket};

use weir_guest::{Record, Result};

#[weir_guest::map]
fn sandbox_probe(record: Record) -> Result<Record> {
    let Ok(value) = std::str::from_utf8(&record.value) else {
        return Ok(record);
    };
    let Some(outcome) = probe(value) else {
        return Ok(record);
    };
    Ok(Record {
        key: record.key,
        value: format!("{value}: {outcome}").into_bytes(),
        timestamp: record.timestamp,
    })
}

/// What the probe `value` names got, or `None` for a value that names no probe.
fn probe(value: &str) -> Option<String> {
    let (verb, arg) = value.split_once(' ').unwrap_or((value, ""));
    Some(match verb {
        "read" => match std::fs::read(arg) {
            Ok(bytes) => format!("GOT DATA: {} bytes", bytes.len()),
            Err(e) => denied(e.kind()),
        },
        "readdir" => match std::fs::read_dir(arg) {
            Ok(entries) => format!("GOT DATA: {} entries", entries.count()),
            Err(e) => denied(e.kind()),
        },
        "write" => match std::fs::write(arg, b"written by a guest") {
            Ok(()) => "GOT WRITE: the file was written".to_owned(),
            Err(e) => denied(e.kind()),
        },
        "env" => {
            let vars: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
            if vars.is_empty() {
                "empty".to_owned()
            } else {
                format!("GOT DATA: {}", vars.join(" "))
            }
        }
        "home" => match std::env::var("HOME") {
            Ok(home) => format!("GOT DATA: {home}"),
            Err(e) => format!("denied: {e}"),
        },
        "args" => {
            let args: Vec<String> = std::env::args().collect();
            if args.is_empty() {
                "empty".to_owned()
            } else {
                format!("GOT DATA: {}", args.join(" "))
            }
        }
        "stdin" => {
            let mut bytes = Vec::new();
            match std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes) {
                Ok(0) => "empty".to_owned(),
                Ok(n) => format!("GOT DATA: {n} bytes"),
                Err(e) => denied(e.kind()),
            }
        }
        "tcp" => match TcpStream::connect(arg) {
            Ok(_) => "GOT CONNECTION".to_owned(),
            Err(e) => denied(e.kind()),
        },
        "udp" => match UdpSocket::bind("0.0.0.0:0").and_then(|s| s.send_to(b"probe", arg)) {
            Ok(sent) => format!("GOT SEND: {sent} bytes"),
            Err(e) => denied(e.kind()),
        },
        "dns" => match arg.to_socket_addrs() {
            Ok(addrs) => format!("GOT DATA: {:?}", addrs.collect::<Vec<_>>()),
            Err(e) => denied(e.kind()),
        },
        _ => return None,
    })
}

fn denied(kind: ErrorKind) -> String {
    format!("denied: {kind:?}")
}
