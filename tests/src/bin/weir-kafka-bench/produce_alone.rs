//! (r): the librdkafka producer alone, the producer-side ceiling in Weir's own client.
//!
//! A copy through the broker produces every record it consumes, on the same machine;
//! producing the same records alone, with the same client library and settings and
//! nothing else to do, is at least as fast. So no copy, Weir's included, outruns this
//! (with the consumer side, (q), the ceiling is the slower of the two).
//!
//! Two threads, like Weir's two subtasks, each with an idempotent `BaseProducer`
//! carrying the settings Weir's at-least-once sink derives from a default spec (one
//! producer per subtask with the whole `buffer_bytes`: `producer_settings`' linger,
//! batch size and queue budget; the fewest, largest requests), produce `value(i)` for
//! their half of `0..records` to a fresh output topic (partition `i % PARTITIONS`),
//! serving delivery reports as the copy does, then flush. Keys and values are built
//! before the clock starts (what a copy gets from its consumer for free). Its rate is
//! records over that time; its topic is read back and checked like every scenario's,
//! and its steady rate taken from the append times.

use std::time::Instant;

use anyhow::Context;
use rdkafka::producer::{BaseRecord, Producer};
use weir::connector::kafka::DeliveryGuarantee;

use weir_tests::process_cpu::CpuMark;

use crate::{
    Budgets, PARTITIONS, Row, idempotent_producer, output_topic, produce_one, steady_rate, value,
    verify,
};

/// Producer threads: as many as Weir's subtasks in the scenarios (2).
const THREADS: u64 = 2;

/// (r)'s row.
pub fn producer_row(records: u64, budgets: Budgets) -> anyhow::Result<Row> {
    let topic = output_topic("bench-produce-alone");
    eprintln!("(r) librdkafka producer alone -> {topic}");
    let shares: Vec<Vec<(String, String)>> = (0..THREADS)
        .map(|t| {
            (t..records)
                .step_by(THREADS as usize)
                .map(|i| (format!("k{i}"), value(i)))
                .collect()
        })
        .collect();
    let mark = CpuMark::now();
    let started = Instant::now();
    let threads: Vec<_> = shares
        .into_iter()
        .enumerate()
        .map(|(t, share)| {
            let topic = topic.clone();
            std::thread::spawn(move || produce_share(&topic, t as u64, &share, budgets))
        })
        .collect();
    for t in threads {
        t.join()
            .map_err(|_| anyhow::anyhow!("producer thread panicked"))??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = mark.elapsed();
    let times = verify(&topic, records, false)?;
    Ok(Row {
        steady: steady_rate(records, times, 0),
        ..Row::new("(r) librdkafka producer alone", records, seconds, cpu)
    })
}

/// Thread `t`'s share: the records `i` with `i % THREADS == t`, as (key, value).
fn produce_share(
    topic: &str,
    t: u64,
    share: &[(String, String)],
    budgets: Budgets,
) -> anyhow::Result<()> {
    let mut sink = budgets.sink();
    sink.delivery = DeliveryGuarantee::AtLeastOnce;
    let producer = idempotent_producer(&sink)?;
    for (n, (key, payload)) in share.iter().enumerate() {
        let i = t + n as u64 * THREADS;
        let record = BaseRecord::<[u8], [u8]>::to(topic)
            .partition((i % PARTITIONS as u64) as i32)
            .key(key.as_bytes())
            .payload(payload.as_bytes());
        produce_one(&producer, record, topic)?;
        if n % 1024 == 1023 {
            producer.poll(std::time::Duration::ZERO);
        }
    }
    producer
        .flush(std::time::Duration::from_secs(120))
        .context("flush")?;
    Ok(())
}
