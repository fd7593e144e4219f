//! (r): the librdkafka producer alone, the producer-side ceiling in Weir's own client.
//!
//! A copy through the broker produces every record it consumes, on the same machine;
//! producing the same records alone, with the same client library and settings and
//! nothing else to do, is at least as fast. So no copy, Weir's included, outruns this
//! (with the consumer side, (q), the ceiling is the slower of the two).
//!
//! Two threads, like Weir's two subtasks, each with an idempotent `BaseProducer`
//! carrying the settings Weir's sink derives from a default spec
//! (`producer_settings`: linger, batch size, queue budget), produce `value(i)` for
//! their half of `0..records` to a fresh output topic (partition `i % PARTITIONS`),
//! serving delivery reports as the copy does, then flush. Its rate is records over that
//! time; its topic is read back and checked like every scenario's, and its steady rate
//! taken from the append times.

use std::time::Instant;

use anyhow::Context;
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer};

use weir_tests::process_cpu::CpuMark;

use crate::{
    Budgets, PARTITIONS, Row, client_config, output_topic, produce_one, steady_rate, value, verify,
};

/// Producer threads: as many as Weir's subtasks in the scenarios (2).
const THREADS: u64 = 2;

/// (r)'s row.
pub fn producer_row(records: u64, budgets: Budgets) -> anyhow::Result<Row> {
    let topic = output_topic("bench-produce-alone");
    eprintln!("(r) librdkafka producer alone -> {topic}");
    let mark = CpuMark::now();
    let started = Instant::now();
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let topic = topic.clone();
            std::thread::spawn(move || produce_share(&topic, t, records, budgets))
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

/// Thread `t`'s share: the records `i` with `i % THREADS == t`.
fn produce_share(topic: &str, t: u64, records: u64, budgets: Budgets) -> anyhow::Result<()> {
    let mut config = client_config();
    config.set("enable.idempotence", "true");
    for (key, value) in budgets.sink().producer_settings() {
        config.set(key, value);
    }
    let producer: BaseProducer<DefaultProducerContext> = config.create().context("producer")?;
    let mut i = t;
    while i < records {
        let (key, payload) = (format!("k{i}"), value(i));
        let record = BaseRecord::<[u8], [u8]>::to(topic)
            .partition((i % PARTITIONS as u64) as i32)
            .key(key.as_bytes())
            .payload(payload.as_bytes());
        produce_one(&producer, record, topic)?;
        if i % 1024 < THREADS {
            producer.poll(std::time::Duration::ZERO);
        }
        i += THREADS;
    }
    producer
        .flush(std::time::Duration::from_secs(120))
        .context("flush")?;
    Ok(())
}
