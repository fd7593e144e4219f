//! (p) and (q): Kafka's own perf tools on the same broker. (q), consuming the bench's
//! input alone, is the consumer side of the ceiling (a copy consumes every record); the
//! producer side is (r), librdkafka producing alone (`produce_alone`), since (p), the
//! Java producer perf test, runs on one producer thread that a copy with two outruns:
//! it stays in the table for reference, as what Kafka's own tool reaches here.
//!
//! - (p) `kafka-producer-perf-test` (`ProducerPerformance`): the input's record count
//!   and value size, unthrottled, with the producer settings Weir's sink has in common
//!   with the Java client (`acks=all`, idempotent, `linger.ms`, `batch.size`; no
//!   compression). Its figure is the tool's own records/s (first send to the last
//!   acknowledgement); its topic is read back for the steady-state window like every
//!   scenario's output.
//! - (q) `kafka-consumer-perf-test` (`ConsumerPerformance`) over the input topic: the
//!   tool's `fetch.nMsg.sec`, records over the time spent fetching, the group join
//!   left out (it is start-up).
//!
//! Both run as `kafka.sh producer-perf` / `consumer-perf`, a JVM with full JIT and G1
//! (as `kafka-run-class.sh` runs them); their CPU is the JVM's, start-up included.

use anyhow::{Context, ensure};

use weir_tests::kafka;
use weir_tests::process_cpu::CpuMark;

use crate::{Budgets, Row, VALUE_BYTES, output_topic, steady_rate};

/// (p): the producer perf test's row.
pub fn producer_row(records: u64, budgets: Budgets) -> anyhow::Result<Row> {
    let topic = output_topic("bench-perf-produce");
    eprintln!("(p) kafka-producer-perf-test -> {topic}");
    let mut props = vec![
        "acks=all".to_owned(),
        "enable.idempotence=true".to_owned(),
        "compression.type=none".to_owned(),
    ];
    for (key, value) in budgets.sink().producer_settings() {
        if matches!(key, "linger.ms" | "batch.size") {
            props.push(format!("{key}={value}"));
        }
    }
    let (records_s, size) = (records.to_string(), VALUE_BYTES.to_string());
    let mut args = vec![
        "producer-perf",
        "--topic",
        &topic,
        "--num-records",
        &records_s,
        "--record-size",
        &size,
        "--throughput",
        "-1",
        "--command-property",
    ];
    args.extend(props.iter().map(String::as_str));
    let mark = CpuMark::now();
    let out = tool(&args)?;
    let cpu = mark.elapsed();
    let rate = producer_rate(&out).with_context(|| format!("no records/sec in {out}"))?;
    let times: Vec<i64> = kafka::read_all_timed(&topic, "read_uncommitted")
        .into_iter()
        .map(|(_, _, t)| t)
        .collect();
    ensure!(
        times.len() as u64 == records,
        "(p) wrote {} records to {topic}, expected {records}",
        times.len()
    );
    Ok(Row {
        steady: steady_rate(records, times, 0),
        ..Row::new(
            "(p) kafka-producer-perf-test",
            records,
            records as f64 / rate,
            cpu,
        )
    })
}

/// (q): the consumer perf test's row over `input` (`records` records).
pub fn consumer_row(input: &str, records: u64) -> anyhow::Result<Row> {
    eprintln!("(q) kafka-consumer-perf-test <- {input}");
    let records_s = records.to_string();
    let group = kafka::unique_name("bench-perf-consume");
    let mark = CpuMark::now();
    let out = tool(&[
        "consumer-perf",
        "--topic",
        input,
        "--num-records",
        &records_s,
        "--group",
        &group,
        "--timeout",
        "30000",
    ])?;
    let cpu = mark.elapsed();
    let (consumed, rate) =
        consumer_figures(&out).with_context(|| format!("no fetch.nMsg.sec in {out}"))?;
    ensure!(
        consumed == records,
        "(q) consumed {consumed} records of {input}, expected {records}"
    );
    Ok(Row::new(
        "(q) kafka-consumer-perf-test",
        records,
        records as f64 / rate,
        cpu,
    ))
}

/// Runs `kafka.sh args...`; its stdout.
fn tool(args: &[&str]) -> anyhow::Result<String> {
    let (ok, out) = kafka::try_kafka_tool(args);
    ensure!(ok, "kafka.sh {}: {out}", args.join(" "));
    Ok(out)
}

/// The records/s of the producer perf test's summary: `N records sent, R records/sec
/// (M MB/sec), ...`, its last line of that form.
fn producer_rate(out: &str) -> Option<f64> {
    let line = out.lines().rev().find(|l| l.contains(" records sent, "))?;
    let before = &line[..line.find(" records/sec")?];
    before.rsplit(' ').next()?.parse().ok()
}

/// (records consumed, `fetch.nMsg.sec`) from the consumer perf test's CSV: a header
/// line naming the columns, then one line of figures.
fn consumer_figures(out: &str) -> Option<(u64, f64)> {
    let mut lines = out.lines().skip_while(|l| !l.starts_with("start.time"));
    let header: Vec<&str> = lines.next()?.split(',').map(str::trim).collect();
    let values: Vec<&str> = lines.next()?.split(',').map(str::trim).collect();
    let column = |name: &str| Some(values[header.iter().position(|h| *h == name)?]);
    let consumed = column("data.consumed.in.nMsg")?.parse().ok()?;
    let rate = column("fetch.nMsg.sec")?.parse().ok()?;
    Some((consumed, rate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_figures_are_read() {
        let produced = "500000 records sent, 99950.0 records/sec (9.53 MB/sec), 3.1 ms avg latency\n\
                        1000000 records sent, 612745.1 records/sec (58.44 MB/sec), 20.87 ms avg latency, 289.00 ms max latency, 2 ms 50th";
        assert_eq!(producer_rate(produced), Some(612745.1));
        let consumed = "WARN something\nstart.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n\
                        2026-12-05 10:00:00:000, 2026-12-05 10:00:04:000, 95.3674, 23.8, 1000000, 250000.0, 3000, 1000, 95.3674, 1000000.0\n";
        assert_eq!(consumer_figures(consumed), Some((1_000_000, 1_000_000.0)));
        assert_eq!(producer_rate("nothing"), None);
        assert_eq!(consumer_figures("start.time, end.time\n"), None);
    }
}
