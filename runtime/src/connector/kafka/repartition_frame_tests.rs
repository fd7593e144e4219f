use std::collections::BTreeMap;

use super::*;

/// Frames sent by a writer, by partition, in the order sent.
type Sent = BTreeMap<i32, Vec<Vec<u8>>>;
/// A record, owned: key, value, event time.
type Owned = (Vec<u8>, Vec<u8>, i64);

fn write(key_groups: KeyGroupRanges, records: &[Owned]) -> Sent {
    let mut writer = FrameWriter::new(key_groups);
    let mut sent = Sent::new();
    let mut send = |p: i32, frame: &[u8]| -> Result<(), ()> {
        sent.entry(p).or_default().push(frame.to_vec());
        Ok(())
    };
    for (k, v, t) in records {
        writer.push((k, v, *t), &mut send).expect("sent");
    }
    writer.flush(&mut send).expect("sent");
    assert!(writer.is_empty());
    sent
}

fn read_all(frame: &[u8]) -> Result<Vec<Owned>, FrameError> {
    let mut reader = FrameReader::new(frame.to_vec());
    let mut out = Vec::new();
    while let Some((k, v, t)) = reader.next_record()? {
        out.push((k.to_vec(), v.to_vec(), t));
    }
    assert_eq!(reader.read() as usize, out.len());
    Ok(out)
}

fn records(n: usize) -> Vec<Owned> {
    let times = [i64::MIN, -1, 0, 1, 1_733_000_000_000, i64::MAX];
    (0..n)
        .map(|i| {
            let key = if i % 7 == 0 {
                Vec::new()
            } else {
                format!("key-{}", i % 50).into_bytes()
            };
            let value = if i % 11 == 0 {
                Vec::new()
            } else {
                vec![b'v'; i % 300]
            };
            (key, value, times[i % times.len()] - (i as i64 % 3))
        })
        .collect()
}

/// Catches: a record lost, changed, reordered or sent to another partition between the
/// writer and the reader, for any key, value or event time (empty ones, times at or
/// below zero and at the ends of i64 included).
#[test]
fn every_record_comes_back_exactly_in_its_partition_in_order() {
    let key_groups = KeyGroupRanges::new(128, 8);
    let input = records(20_000);
    let sent = write(key_groups, &input);
    for (partition, frames) in &sent {
        let expected: Vec<_> = input
            .iter()
            .filter(|(k, _, _)| repartition::partition_of_key(k, key_groups) == *partition)
            .cloned()
            .collect();
        let got: Vec<_> = frames
            .iter()
            .flat_map(|f| read_all(f).expect("a frame"))
            .collect();
        assert_eq!(got, expected, "partition {partition}");
    }
    let total: usize = sent
        .values()
        .flatten()
        .map(|f| read_all(f).expect("a frame").len())
        .sum();
    assert_eq!(total, input.len());
}

/// Catches: frames growing past their bound (a writer's memory, a Kafka record too
/// large for the broker), or a large record packed beside others instead of alone.
#[test]
fn a_frame_stays_within_its_size_and_a_large_record_goes_alone() {
    let key_groups = KeyGroupRanges::new(32, 32);
    let bound = frame_bytes(32);
    assert_eq!(bound, MAX_FRAME_BYTES);
    let mut input = records(5_000);
    input.insert(2_500, (b"key-1".to_vec(), vec![b'x'; 3 * bound], 5));
    let sent = write(key_groups, &input);
    let mut alone = 0;
    for frame in sent.values().flatten() {
        let records = read_all(frame).expect("a frame");
        assert!(!records.is_empty(), "no empty frame is sent");
        if frame.len() > bound {
            assert_eq!(
                records.len(),
                1,
                "only a record larger than a frame exceeds it"
            );
            assert!(frame.len() <= records[0].1.len() + records[0].0.len() + MAX_RECORD_OVERHEAD);
            alone += 1;
        }
    }
    assert_eq!(alone, 1);
    // Small records fill frames: far fewer frames than records.
    assert!(sent.values().flatten().count() < input.len() / 100);
}

#[test]
fn the_frame_size_shares_the_writer_buffer_between_partitions() {
    assert_eq!(frame_bytes(1), MAX_FRAME_BYTES);
    assert_eq!(frame_bytes(32), 64 << 10);
    assert_eq!(frame_bytes(128), 16 << 10);
    assert_eq!(frame_bytes(1024), MIN_FRAME_BYTES);
    assert_eq!(frame_bytes(0), MAX_FRAME_BYTES);
}

/// Catches: a value that is not a frame (cut short anywhere, a length past its end, a
/// varint that never ends) read out of bounds, panicking, or taken as records it does
/// not hold.
#[test]
fn bytes_that_are_not_a_frame_are_an_error_never_a_panic() {
    let sent = write(KeyGroupRanges::new(1, 1), &records(40));
    let frame = &sent[&0][0];
    let whole = read_all(frame).expect("a frame");
    for cut in 0..frame.len() {
        match read_all(&frame[..cut]) {
            // A cut between two records is a shorter frame of the same records.
            Ok(prefix) => assert_eq!(prefix[..], whole[..prefix.len()], "cut at {cut}"),
            Err(FrameError::Truncated { len, .. }) => assert_eq!(len, cut),
            Err(e) => panic!("cut at {cut}: {e}"),
        }
    }
    assert!(matches!(
        read_all(&[0xff; 11]),
        Err(FrameError::Varint { record: 0, .. })
    ));
    // A key length of u64::MAX.
    let mut huge = vec![0xff; 9];
    huge.push(0x01);
    assert!(matches!(
        read_all(&huge),
        Err(FrameError::Truncated { record: 0, .. })
    ));
}

/// Catches: a reader restored inside a frame returning its first records again, or
/// skipping past a frame shorter than its position says.
#[test]
fn a_reader_skips_what_its_position_says_was_read() {
    let sent = write(KeyGroupRanges::new(1, 1), &records(10));
    let frame = &sent[&0][0];
    let whole = read_all(frame).expect("a frame");
    let mut reader = FrameReader::new(frame.clone());
    reader.skip(4).expect("skipped");
    let (k, v, t) = reader.next_record().expect("a record").expect("one more");
    assert_eq!((k.to_vec(), v.to_vec(), t), whole[4]);
    assert_eq!(reader.read(), 5);
    let mut reader = FrameReader::new(frame.clone());
    assert_eq!(
        reader.skip(11),
        Err(FrameError::TooShort {
            found: 10,
            expected: 11
        })
    );
}
