//! `run_map`: decode, call per record, encode, reject.

use super::*;
use crate::Emitter;

fn batch(records: &[(&str, &str, i64)]) -> Batch {
    let mut batch = Batch::default();
    for &(key, value, timestamp) in records {
        batch.push(key.as_bytes(), value.as_bytes(), timestamp);
    }
    batch
}

fn records(batch: &Batch) -> Vec<(String, String, i64)> {
    batch
        .iter()
        .map(|(k, v, t)| {
            (
                String::from_utf8_lossy(k).into(),
                String::from_utf8_lossy(v).into(),
                t,
            )
        })
        .collect()
}

#[test]
fn a_map_sees_each_record_and_its_output_is_encoded_in_order() {
    let input = batch(&[("a", "x", 1), ("", "y", 2), ("c", "", 3)]);
    let (output, rejections) = run_map(&input, |mut r: Record| {
        r.value.extend_from_slice(b"!");
        Ok(r)
    });
    assert!(rejections.is_empty());
    assert_eq!(
        records(&output),
        [
            ("a".into(), "x!".into(), 1),
            ("".into(), "y!".into(), 2),
            ("c".into(), "!".into(), 3)
        ]
    );
}

#[test]
fn identity_map_round_trips_the_batch_byte_for_byte() {
    let input = batch(&[("k", "v", -1), ("", "", 0), ("key", "value", i64::MIN)]);
    let (output, _) = run_map(&input, Ok::<Record, Error>);
    assert_eq!(output, input);
}

#[test]
fn filter_and_flat_map_outputs() {
    let input = batch(&[("a", "keep", 1), ("b", "drop", 2), ("c", "keep", 3)]);
    let (kept, _) = run_map(&input, |r: Record| Ok((r.value == b"keep").then_some(r)));
    assert_eq!(
        records(&kept),
        [
            ("a".into(), "keep".into(), 1),
            ("c".into(), "keep".into(), 3)
        ]
    );

    let input = batch(&[("a", "x y", 1), ("b", "", 2), ("c", "z", 3)]);
    let (split, _) = run_map(&input, |r: Record| {
        Ok(r.value_str()?
            .split_whitespace()
            .map(|w| Record::new(w, w).with_timestamp(r.timestamp))
            .collect::<Vec<_>>())
    });
    assert_eq!(
        records(&split),
        [
            ("x".into(), "x".into(), 1),
            ("y".into(), "y".into(), 1),
            ("z".into(), "z".into(), 3)
        ]
    );
}

#[test]
fn an_err_rejects_that_record_only_with_its_index_and_reason() {
    let mut input = batch(&[("a", "1", 1), ("b", "two", 2), ("c", "3", 3)]);
    input.push(b"d", &[0xff], 4);
    let (output, rejections) = run_map(&input, |r: Record| {
        let n: i64 = r.value_str()?.parse()?;
        Ok(Record::new(r.key, (n * 10).to_string()))
    });
    assert_eq!(
        records(&output),
        [("a".into(), "10".into(), 0), ("c".into(), "30".into(), 0)]
    );
    assert_eq!(rejections.len(), 2);
    assert_eq!(
        rejections[0],
        Rejection {
            index: 1,
            reason: "invalid digit found in string".into()
        }
    );
    assert_eq!(rejections[1].index, 3);
    assert!(
        rejections[1].reason.starts_with("value is not UTF-8"),
        "{}",
        rejections[1].reason
    );
}

#[test]
fn an_empty_batch_calls_nothing() {
    let (output, rejections) = run_map(&Batch::default(), |_: Record| -> crate::Result<Record> {
        panic!("called")
    });
    assert!(output.is_empty() && rejections.is_empty());
}

#[test]
fn a_borrowed_map_reads_the_batch_in_place() {
    let input = batch(&[("a", "x", 1), ("", "yz", 2)]);
    let (output, rejections) = run_map(&input, |r: RecordRef<'_>| {
        // The view points into the input's columns: no copy was made.
        assert!(input.values.as_ptr_range().contains(&r.value.as_ptr()));
        Ok(Record::new(r.key, r.value_str()?.to_uppercase()).with_timestamp(r.timestamp))
    });
    assert!(rejections.is_empty());
    assert_eq!(
        records(&output),
        [("a".into(), "X".into(), 1), ("".into(), "YZ".into(), 2)]
    );
}

fn shout(r: RecordRef<'_>, out: &mut Emitter<'_>) -> crate::Result<()> {
    let text = r.value_str()?;
    out.emit(r.key, text.to_uppercase(), r.timestamp);
    Ok(())
}

#[test]
fn an_emitting_map_gives_the_same_output_as_the_owned_form() {
    let mut input = batch(&[("a", "one", 1), ("", "", 2), ("c", "Grüße", 3)]);
    input.push(b"d", &[0xff], 4);
    let owned = |mut r: Record| -> crate::Result<Record> {
        r.value = r.value_str()?.to_uppercase().into_bytes();
        Ok(r)
    };
    assert_eq!(run_map(&input, shout), run_map(&input, owned));
    let (output, rejections) = run_map(&input, shout);
    assert_eq!(records(&output)[2], ("c".into(), "GRÜSSE".into(), 3));
    assert_eq!(rejections.len(), 1);
    assert_eq!(rejections[0].index, 3);
}

#[test]
fn an_err_discards_what_that_record_had_emitted() {
    let input = batch(&[("a", "2", 1), ("b", "x", 2), ("c", "1", 3)]);
    // Emits the value's first byte, then as many copies as the value says: "x" has
    // emitted once when it fails to parse.
    let (output, rejections) = run_map(&input, |r: RecordRef<'_>, out: &mut Emitter<'_>| {
        out.emit_ref(r);
        let n: usize = r.value_str()?.parse()?;
        for _ in 0..n {
            out.emit_with(r.key, r.timestamp, |v| v.push(b'+'));
        }
        Ok(())
    });
    assert_eq!(
        records(&output),
        [
            ("a".into(), "2".into(), 1),
            ("a".into(), "+".into(), 1),
            ("a".into(), "+".into(), 1),
            ("c".into(), "1".into(), 3),
            ("c".into(), "+".into(), 3),
        ]
    );
    assert_eq!(rejections.len(), 1);
    assert_eq!(rejections[0].index, 1);
}
