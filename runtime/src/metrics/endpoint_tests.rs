use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;
use crate::metrics::guest_memory::StepGuestMemory;

const BOUND: Duration = Duration::from_secs(30);

fn at(started: u64, last_checkpoint: u64) -> MetricsSnapshot {
    MetricsSnapshot {
        started_unix_ms: started,
        last_checkpoint_unix_ms: last_checkpoint,
        ..MetricsSnapshot::default()
    }
}

#[test]
fn recovery_is_never_a_stall() {
    assert_eq!(liveness(&at(0, 0), 10_000_000, BOUND), Liveness::Starting);
}

#[test]
fn a_running_pipeline_stalls_without_checkpoints_for_longer_than_the_bound() {
    let started = 1_000_000;
    assert_eq!(
        liveness(&at(started, 0), started + 30_000, BOUND),
        Liveness::Alive
    );
    assert_eq!(
        liveness(&at(started, 0), started + 30_001, BOUND),
        Liveness::Stalled { for_ms: 30_001 }
    );
    // A checkpoint resets the clock; the bound counts from the last one.
    let last = started + 29_000;
    assert_eq!(
        liveness(&at(started, last), last + 30_000, BOUND),
        Liveness::Alive
    );
    assert_eq!(
        liveness(&at(started, last), last + 45_000, BOUND),
        Liveness::Stalled { for_ms: 45_000 }
    );
    // A clock that went back is no stall.
    assert_eq!(
        liveness(&at(started, last), started - 5, BOUND),
        Liveness::Alive
    );
}

#[test]
fn the_stall_bound_is_two_whole_checkpoint_rounds_and_at_least_thirty_seconds() {
    let s = Duration::from_secs;
    assert_eq!(stall_after(s(1), s(10)), MIN_STALL_AFTER);
    assert_eq!(stall_after(s(10), s(60)), s(140));
    assert_eq!(stall_after(Duration::MAX, s(1)), Duration::MAX);
}

#[test]
fn openmetrics_text_has_every_counter_once_with_an_escaped_label() {
    let m = MetricsSnapshot {
        records_in: 7,
        records_out: 5,
        dead_letters: 2,
        checkpoints_completed: 3,
        consumer_lag: 11,
        last_checkpoint_id: 9,
        guest_log_dropped_lines: 4,
        ..MetricsSnapshot::default()
    };
    let text = exposition::openmetrics_text("a\"b", &m);
    for line in [
        "# TYPE weir_records_in counter",
        "weir_records_in_total{pipeline=\"a\\\"b\"} 7",
        "weir_records_out_total{pipeline=\"a\\\"b\"} 5",
        "weir_dead_letters_total{pipeline=\"a\\\"b\"} 2",
        "weir_checkpoints_completed_total{pipeline=\"a\\\"b\"} 3",
        "# TYPE weir_consumer_lag gauge",
        "weir_consumer_lag{pipeline=\"a\\\"b\"} 11",
        "weir_last_checkpoint_id{pipeline=\"a\\\"b\"} 9",
        "weir_guest_log_dropped_lines_total{pipeline=\"a\\\"b\"} 4",
    ] {
        assert_eq!(
            text.lines().filter(|l| *l == line).count(),
            1,
            "{line} in\n{text}"
        );
    }
    assert_eq!(text.lines().filter(|l| l.starts_with("weir_")).count(), 11);
    assert!(text.ends_with("\n# EOF\n"), "{text}");
    let odd = exposition::openmetrics_text("a\\b\nc", &m);
    assert!(
        odd.contains("weir_records_in_total{pipeline=\"a\\\\b\\nc\"} 7\n"),
        "{odd}"
    );
}

#[test]
fn openmetrics_text_has_guest_memory_per_step() {
    let figures = |max_bytes, total_bytes| StepGuestMemory {
        instances: 2,
        max_bytes,
        total_bytes,
        recycled: 4,
    };
    let m = MetricsSnapshot {
        guest_memory: [
            ("step-0".to_owned(), figures(5, 8)),
            ("st\"ep-1".to_owned(), figures(3, 3)),
        ]
        .into(),
        ..MetricsSnapshot::default()
    };
    let text = exposition::openmetrics_text("p", &m);
    for line in [
        "# TYPE weir_guest_memory_bytes gauge",
        "weir_guest_memory_bytes{pipeline=\"p\",step=\"step-0\"} 8",
        "weir_guest_memory_bytes{pipeline=\"p\",step=\"st\\\"ep-1\"} 3",
        "# TYPE weir_guest_memory_max_instance_bytes gauge",
        "weir_guest_memory_max_instance_bytes{pipeline=\"p\",step=\"step-0\"} 5",
        "weir_guest_memory_max_instance_bytes{pipeline=\"p\",step=\"st\\\"ep-1\"} 3",
        "# TYPE weir_guest_recycles counter",
        "weir_guest_recycles_total{pipeline=\"p\",step=\"step-0\"} 4",
    ] {
        assert_eq!(
            text.lines().filter(|l| *l == line).count(),
            1,
            "{line} in\n{text}"
        );
    }
}

/// `GET path` over HTTP/1.0: (status code, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: weir\r\n\r\n").expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn the_endpoint_answers_from_the_live_counters() {
    let metrics = Arc::new(PipelineMetrics::default());
    let stop = Arc::new(AtomicUsize::new(0));
    let endpoint = WorkerEndpoint::start(
        "127.0.0.1:0".parse().expect("addr"),
        "wc",
        metrics.clone(),
        Duration::from_secs(3600),
        stop.clone(),
    )
    .expect("start");
    let addr = endpoint.addr();
    assert_eq!(get(addr, "/healthz"), (200, "starting\n".into()));
    assert_eq!(get(addr, "/readyz"), (503, "recovering\n".into()));

    metrics.started_unix_ms.store(unix_ms(), Ordering::Relaxed);
    PipelineMetrics::add(&metrics.records_in, 42);
    assert_eq!(get(addr, "/healthz"), (200, "ok\n".into()));
    assert_eq!(get(addr, "/readyz"), (200, "ready\n".into()));
    let (status, text) = get(addr, "/metrics");
    assert_eq!(status, 200);
    assert!(
        text.contains("weir_records_in_total{pipeline=\"wc\"} 42\n"),
        "{text}"
    );

    stop.store(15, Ordering::Relaxed);
    assert_eq!(get(addr, "/readyz"), (503, "stopping\n".into()));

    // Started an hour and a bit ago, never a checkpoint: stalled.
    metrics
        .started_unix_ms
        .store(unix_ms() - 3_700_000, Ordering::Relaxed);
    let (status, body) = get(addr, "/healthz");
    assert_eq!(status, 503);
    assert!(
        body.starts_with("stalled: no checkpoint completed for 37"),
        "{body}"
    );

    drop(endpoint);
    assert!(TcpStream::connect(addr).is_err(), "stopped with its owner");
}

#[test]
fn a_taken_address_is_refused_by_name() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let err = WorkerEndpoint::start(
        addr,
        "wc",
        Arc::default(),
        BOUND,
        Arc::new(AtomicUsize::new(0)),
    )
    .expect_err("taken");
    assert!(
        err.to_string()
            .starts_with(&format!("cannot serve the health endpoint on {addr}: ")),
        "{err}"
    );
}
