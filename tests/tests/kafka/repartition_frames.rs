//! The reader of a repartition topic against the real broker: frames (many records in
//! one Kafka record) and records of their own (as a Weir before frames wrote them)
//! come back exactly, in order, with their event times; a position taken inside a
//! frame resumes after exactly the records returned, at every cut; a value that is not
//! a frame, a frame of another format version, or a position that says more of a frame
//! was read than it holds, fails the source with one line naming the partition and
//! offset.

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use weir::cluster::{KeyGroupRanges, Worker};
use weir::connector::kafka::repartition::{EVENT_TIME_HEADER, RepartitionRead};
use weir::connector::kafka::repartition_frame::{FRAME_HEADER, FRAME_VERSION, FrameWriter};
use weir::connector::kafka::{KafkaPosition, KafkaSource, KafkaSourceConfig};
use weir::dataflow::source::{Source, SourcePoll};
use weir::record::SourcePosition;
use weir::record::batch::{BatchLimit, RecordBatch};
use weir_tests::kafka;

/// One partition: all key groups in one range.
const ONE_RANGE: KeyGroupRanges = KeyGroupRanges::new(1, 1);

type Record = (Vec<u8>, Vec<u8>, i64);

/// What the topic's one partition holds, in offset order.
enum Written {
    Own(Record),
    Frame(Vec<Record>),
    Bytes(Vec<u8>),
    /// A frame header of another format version over these bytes.
    Version(&'static [u8], Vec<u8>),
}

fn frame_bytes(records: &[Record]) -> Vec<u8> {
    let mut writer = FrameWriter::new(ONE_RANGE);
    let mut frame = Vec::new();
    let mut send = |_p: i32, bytes: &[u8]| -> Result<(), ()> {
        frame.extend_from_slice(bytes);
        Ok(())
    };
    for (k, v, t) in records {
        writer.push((k, v, *t), &mut send).expect("in memory");
    }
    writer.flush(&mut send).expect("in memory");
    frame
}

fn produce(topic: &str, written: &[Written]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka::bootstrap())
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    for w in written {
        let frame_header = |version: &'static [u8]| {
            OwnedHeaders::new().insert(Header {
                key: FRAME_HEADER,
                value: Some(version),
            })
        };
        let record = BaseRecord::<[u8], [u8]>::to(topic).partition(0);
        let (frame, record) = match w {
            Written::Frame(records) => (
                frame_bytes(records),
                record.headers(frame_header(FRAME_VERSION)),
            ),
            Written::Bytes(bytes) => (bytes.clone(), record.headers(frame_header(FRAME_VERSION))),
            Written::Version(version, bytes) => {
                (bytes.clone(), record.headers(frame_header(version)))
            }
            Written::Own((k, v, t)) if *t <= 0 => {
                let headers = OwnedHeaders::new().insert(Header {
                    key: EVENT_TIME_HEADER,
                    value: Some(&t.to_be_bytes()[..]),
                });
                (v.clone(), record.key(k.as_slice()).headers(headers))
            }
            Written::Own((k, v, t)) => (v.clone(), record.key(k.as_slice()).timestamp(*t)),
        };
        producer
            .send(record.payload(frame.as_slice()))
            .map_err(|(e, _)| e)
            .expect("send");
        // One at a time, so the offsets are the order above.
        producer.flush(Duration::from_secs(30)).expect("flush");
    }
}

fn open(topic: &str, restored: Option<&SourcePosition>) -> KafkaSource {
    let read = RepartitionRead {
        key_groups: ONE_RANGE,
        writers: None,
    };
    let restored: Vec<&SourcePosition> = restored.into_iter().collect();
    KafkaSource::open(
        (&KafkaSourceConfig::new(topic), Some(read)),
        &kafka::unique_name("frames-group"),
        Worker::SINGLE,
        0,
        1,
        (!restored.is_empty()).then_some(restored.as_slice()),
    )
    .expect("the source opens")
}

/// Polls `source` (`per_poll` records at most each time) until drained: the records
/// of each poll that returned some, with the position after it.
fn read_to_end(source: &mut KafkaSource, per_poll: usize) -> Vec<(Vec<Record>, SourcePosition)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut polls = Vec::new();
    loop {
        let mut batch = RecordBatch::default();
        let status = source
            .poll(&mut batch, BatchLimit::records(per_poll))
            .expect("a poll");
        assert!(batch.len() <= per_poll, "a poll returns at most its limit");
        if !batch.is_empty() {
            let records = (0..batch.len())
                .map(|i| {
                    let r = batch.get(i);
                    (r.key.to_vec(), r.value.to_vec(), r.timestamp)
                })
                .collect();
            polls.push((records, source.position()));
        }
        if matches!(status, SourcePoll::Drained) {
            return polls;
        }
        assert!(Instant::now() < deadline, "the source drains in time");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn poll_error(source: &mut KafkaSource) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match source.poll(&mut RecordBatch::default(), BatchLimit::records(100)) {
            Err(e) => return e.to_string(),
            Ok(SourcePoll::Drained) => panic!("the source drained without an error"),
            Ok(_) => {}
        }
        assert!(Instant::now() < deadline, "the source fails in time");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn record(i: usize, t: i64) -> Record {
    (
        format!("key-{i}").into_bytes(),
        vec![b'a' + (i % 26) as u8; i % 5],
        t,
    )
}

/// Catches: a frame's records lost, repeated or reordered, a record of its own (before
/// frames) no longer read, or a position inside a frame that resumes at the frame's
/// start (records again) or after it (records lost), at any cut.
#[test]
fn frames_and_records_of_their_own_come_back_exactly_from_every_position() {
    let topic = kafka::unique_name("frames");
    kafka::create_topic(&topic, 1);
    let first: Vec<Record> = (1..=10).map(|i| record(i, -(i as i64))).collect();
    let second: Vec<Record> = (11..=17)
        .map(|i| record(i, 1_700_000_000_000 + i as i64))
        .collect();
    let written = vec![
        Written::Own(record(0, 1_700_000_000_000)),
        Written::Frame(first.clone()),
        Written::Frame(second.clone()),
        Written::Own(record(18, -18)),
    ];
    produce(&topic, &written);
    let mut expected = vec![record(0, 1_700_000_000_000)];
    expected.extend(first);
    expected.extend(second);
    expected.push(record(18, -18));

    let polls = read_to_end(&mut open(&topic, None), 3);
    let all: Vec<Record> = polls.iter().flat_map(|(r, _)| r.clone()).collect();
    assert_eq!(all, expected);
    let inside = polls
        .iter()
        .filter(|(_, p)| {
            KafkaPosition::from_value(p).expect("a position").partitions[0].frame_read > 0
        })
        .count();
    assert!(
        inside >= 4,
        "polls of 3 records end inside the frames: {inside}"
    );

    // Resume from the position after each poll: exactly the rest, once.
    let mut returned = 0;
    for (records, position) in &polls {
        returned += records.len();
        let rest: Vec<Record> = read_to_end(&mut open(&topic, Some(position)), 4)
            .into_iter()
            .flat_map(|(r, _)| r)
            .collect();
        assert_eq!(rest, expected[returned..], "resumed at {position}");
    }
}

/// Catches: bytes under the frame header that are not a frame read out of bounds,
/// panicking or returned as records; a position inside a frame that holds fewer
/// records than it says taken as the frame's end.
#[test]
fn a_value_that_is_not_a_frame_or_a_position_past_a_frame_fails_with_where() {
    let topic = kafka::unique_name("frames-bad");
    kafka::create_topic(&topic, 1);
    let mut cut = frame_bytes(&[record(1, 5), record(2, 6)]);
    cut.pop();
    produce(
        &topic,
        &[Written::Frame(vec![record(1, 5)]), Written::Bytes(cut)],
    );

    let error = poll_error(&mut open(&topic, None));
    assert!(
        error.contains(&format!(
            "repartition topic {topic}, partition 0, offset 1: record 1 is cut off"
        )),
        "{error}"
    );

    let mut position = KafkaPosition::from_value(&open(&topic, None).position()).expect("position");
    position.partitions[0].frame_read = 2;
    let error = poll_error(&mut open(&topic, Some(&position.to_value())));
    assert!(
        error.contains(&format!(
            "repartition topic {topic}, partition 0, offset 0: the frame holds 1 records, but the position says 2 of them were read"
        )),
        "{error}"
    );
}

/// Catches: a frame of another format (a newer weir's, in a rolling upgrade) taken for
/// a record of its own, its bytes handed to the aggregate as one record's value.
#[test]
fn a_frame_of_another_format_fails_with_where_never_read_as_a_record() {
    let topic = kafka::unique_name("frames-version");
    kafka::create_topic(&topic, 1);
    let bytes = frame_bytes(&[record(1, 5)]);
    produce(&topic, &[Written::Version(b"2", bytes)]);
    let error = poll_error(&mut open(&topic, None));
    assert!(
        error.contains(&format!(
            "repartition topic {topic}, partition 0, offset 0: a frame of format \"2\", but this weir reads format \"1\""
        )),
        "{error}"
    );
}
