//! `run_update` and `run_emit`: accumulator framing, defaults, rejections.

use serde::{Deserialize, Serialize};

use super::*;
use crate::{Error, Result};

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Acc {
    count: u64,
    sum: i64,
    last: String,
}

fn encode(acc: &Acc) -> Vec<u8> {
    postcard::to_allocvec(acc).expect("postcard")
}

/// One group: its accumulator bytes and its `(key, value)` records.
type Group<'a> = (Vec<u8>, &'a [(&'a str, &'a str)]);

/// A group-batch of these groups.
fn groups(groups: &[Group<'_>]) -> GroupBatch {
    let mut batch = GroupBatch::default();
    for (acc, records) in groups {
        framing::push_frame(&mut batch.accumulator_ends, &mut batch.accumulators, acc);
        for (i, &(key, value)) in records.iter().enumerate() {
            batch
                .records
                .push(key.as_bytes(), value.as_bytes(), i as i64);
        }
        batch.record_ends.push(batch.records.len() as u32);
    }
    batch
}

fn accumulators(output: &UpdateOutput) -> Vec<&[u8]> {
    framing::frames(
        &output.accumulator_ends,
        &output.accumulators,
        "accumulators",
    )
    .collect()
}

/// Adds the value as a number; refuses anything else, before mutating.
fn add(acc: &mut Acc, record: &Record) -> Result<()> {
    let n: i64 = record.value_str()?.parse()?;
    let sum = acc
        .sum
        .checked_add(n)
        .ok_or_else(|| Error::new("overflow"))?;
    acc.count += 1;
    acc.sum = sum;
    acc.last = record.key_str()?.to_owned();
    Ok(())
}

#[test]
fn an_empty_accumulator_starts_from_default_and_existing_ones_are_decoded() {
    let existing = Acc {
        count: 2,
        sum: 10,
        last: "k".into(),
    };
    let input = groups(&[
        (vec![], &[("a", "1"), ("a", "2")]),
        (encode(&existing), &[("k", "5")]),
    ]);
    let output = run_update(&input, add);
    assert!(output.rejections.is_empty());
    let accs = accumulators(&output);
    assert_eq!(accs.len(), 2);
    assert_eq!(
        postcard::from_bytes::<Acc>(accs[0]).expect("decodes"),
        Acc {
            count: 2,
            sum: 3,
            last: "a".into()
        }
    );
    assert_eq!(
        postcard::from_bytes::<Acc>(accs[1]).expect("decodes"),
        Acc {
            count: 3,
            sum: 15,
            last: "k".into()
        }
    );
}

#[test]
fn a_group_whose_records_are_all_rejected_keeps_its_accumulator_byte_for_byte() {
    let existing = encode(&Acc {
        count: 1,
        sum: 7,
        last: "b".into(),
    });
    let input = groups(&[
        (vec![], &[("a", "x")]), // none yet, all rejected: stays none
        (existing.clone(), &[("b", "y"), ("b", "z")]), // all rejected: unchanged
        (vec![], &[("c", "4"), ("c", "bad")]), // partly rejected: updated
    ]);
    let output = run_update(&input, add);
    let accs = accumulators(&output);
    assert_eq!(accs[0], b"");
    assert_eq!(accs[1], existing.as_slice());
    assert_eq!(
        postcard::from_bytes::<Acc>(accs[2]).expect("decodes"),
        Acc {
            count: 1,
            sum: 4,
            last: "c".into()
        }
    );
    // Indices are positions in `groups.records`, across groups.
    let indices: Vec<u32> = output.rejections.iter().map(|r| r.index).collect();
    assert_eq!(indices, [0, 1, 2, 4]);
    assert_eq!(output.rejections[0].reason, "invalid digit found in string");
}

#[test]
fn a_group_without_records_keeps_its_accumulator() {
    let existing = encode(&Acc {
        count: 1,
        sum: 1,
        last: String::new(),
    });
    let input = groups(&[(existing.clone(), &[]), (vec![], &[])]);
    let output = run_update(&input, add);
    assert_eq!(accumulators(&output), [existing.as_slice(), b""]);
}

#[test]
fn an_infallible_update_and_an_empty_batch() {
    let input = groups(&[
        (vec![], &[("a", "x"), ("a", "y")]),
        (
            postcard::to_allocvec(&5u64).expect("postcard"),
            &[("b", "z")],
        ),
    ]);
    let output = run_update(&input, |n: &mut u64, _: &Record| *n += 1);
    let counts: Vec<u64> = accumulators(&output)
        .iter()
        .map(|b| postcard::from_bytes(b).expect("decodes"))
        .collect();
    assert_eq!(counts, [2, 6]);

    let output = run_update(&GroupBatch::default(), |n: &mut u64, _: &Record| *n += 1);
    assert_eq!(output, UpdateOutput::default());
}

#[test]
#[should_panic(expected = "does not decode as")]
fn an_accumulator_of_another_type_traps() {
    let input = groups(&[(vec![0xff, 0xff, 0xff], &[("a", "1")])]);
    let _ = run_update(&input, add);
}

#[test]
#[should_panic(expected = "do not cover all")]
fn groups_that_do_not_cover_the_records_trap() {
    let mut input = groups(&[(vec![], &[("a", "1"), ("a", "2")])]);
    input.record_ends = vec![1];
    let _ = run_update(&input, add);
}

#[test]
fn emit_decodes_each_accumulator_with_its_key_and_window() {
    let mut entries = EmitBatch::default();
    let windowed = Window {
        start: 1000,
        end: 2000,
    };
    for (key, window, acc) in [
        (
            "a",
            Some(windowed),
            encode(&Acc {
                count: 3,
                sum: 9,
                last: "a".into(),
            }),
        ),
        ("b", None, vec![]),
    ] {
        framing::push_frame(&mut entries.key_ends, &mut entries.keys, key.as_bytes());
        entries.windows.push(window);
        framing::push_frame(
            &mut entries.accumulator_ends,
            &mut entries.accumulators,
            &acc,
        );
    }
    let mut seen = Vec::new();
    let output = run_emit(&entries, |key: &[u8], window: Option<Window>, acc: &Acc| {
        seen.push((key.to_vec(), window, acc.clone()));
        // Two records for a window, none without one.
        window.map_or_else(Vec::new, |w| {
            vec![
                Record::new(key, acc.sum.to_string()).with_timestamp(w.end - 1),
                Record::new(key, "again"),
            ]
        })
    });
    assert_eq!(
        seen[0],
        (
            b"a".to_vec(),
            Some(windowed),
            Acc {
                count: 3,
                sum: 9,
                last: "a".into()
            }
        )
    );
    assert_eq!(seen[1], (b"b".to_vec(), None, Acc::default()));
    let records: Vec<_> = output.iter().collect();
    assert_eq!(
        records,
        [(&b"a"[..], &b"9"[..], 1999), (&b"a"[..], &b"again"[..], 0)]
    );
}

#[test]
fn an_emitting_emit_function_writes_straight_into_the_output() {
    let mut entries = EmitBatch::default();
    for (key, sum) in [("a", 7), ("b", 0), ("c", 12)] {
        framing::push_frame(&mut entries.key_ends, &mut entries.keys, key.as_bytes());
        entries.windows.push(None);
        let acc = Acc {
            count: 1,
            sum,
            last: String::new(),
        };
        framing::push_frame(
            &mut entries.accumulator_ends,
            &mut entries.accumulators,
            &encode(&acc),
        );
    }
    // Nothing for a zero sum; the value written in two pieces for the others.
    let output = run_emit(
        &entries,
        |key: &[u8], _: Option<Window>, acc: &Acc, out: &mut Emitter<'_>| {
            if acc.sum != 0 {
                out.emit_with(key, acc.sum, |value| {
                    value.push_str("sum=");
                    value.push_str(&acc.sum.to_string());
                });
            }
        },
    );
    let records: Vec<_> = output.iter().collect();
    assert_eq!(
        records,
        [
            (&b"a"[..], &b"sum=7"[..], 7),
            (&b"c"[..], &b"sum=12"[..], 12)
        ]
    );
}

/// The fused call returns `run_update`'s output byte for byte and, for each group whose
/// new accumulator is not empty, what `run_emit` returns for it (the group's key, no
/// window): groups updated, all refused with an accumulator (emitted unchanged) and all
/// refused without one (nothing emitted).
#[test]
fn update_and_emit_is_update_then_emit_of_the_non_empty_accumulators() {
    let existing = encode(&Acc {
        count: 1,
        sum: 7,
        last: "b".into(),
    });
    let input = groups(&[
        (vec![], &[("a", "1"), ("a", "2")]),
        (existing.clone(), &[("b", "x")]),
        (vec![], &[("c", "y")]),
        (existing, &[("d", "3")]),
    ]);
    let emit = |key: &[u8], window: Option<Window>, acc: &Acc| {
        assert_eq!(window, None);
        Record::new(key, format!("{}:{}", acc.count, acc.sum))
    };
    let (update, records) = run_update_and_emit(&input, add, emit);
    assert_eq!(update, run_update(&input, add));
    let emitted: Vec<(&[u8], &[u8], i64)> = records.iter().collect();
    assert_eq!(
        emitted,
        [
            (&b"a"[..], &b"2:3"[..], 0),
            (&b"b"[..], &b"1:7"[..], 0),
            (&b"d"[..], &b"2:10"[..], 0),
        ]
    );
    // The same as `emit` of the non-empty accumulators.
    let mut entries = EmitBatch::default();
    for (key, acc) in [("a", 0), ("b", 1), ("d", 3)] {
        framing::push_frame(&mut entries.key_ends, &mut entries.keys, key.as_bytes());
        entries.windows.push(None);
        let bytes = accumulators(&update)[acc];
        framing::push_frame(
            &mut entries.accumulator_ends,
            &mut entries.accumulators,
            bytes,
        );
    }
    assert_eq!(records, run_emit(&entries, emit));
}

/// `add` reading each record in place.
fn add_ref(acc: &mut Acc, record: RecordRef<'_>) -> Result<()> {
    add(acc, &record.to_owned())
}

/// The `RecordRef` form of an update folds exactly as the `&Record` form: the same
/// accumulators, rejections and (fused) records, groups of refused records included.
#[test]
fn an_update_reading_records_in_place_equals_the_owned_form() {
    let existing = encode(&Acc {
        count: 1,
        sum: 7,
        last: "b".into(),
    });
    let input = groups(&[
        (vec![], &[("a", "1"), ("a", "x"), ("a", "2")]),
        (existing.clone(), &[("b", "x")]),
        (vec![], &[("c", "y")]),
        (existing, &[("d", "3")]),
    ]);
    let owned = run_update(&input, add);
    assert_eq!(owned.rejections.len(), 3);
    assert_eq!(run_update(&input, add_ref), owned);
    let emit = |key: &[u8], _: Option<Window>, acc: &Acc| {
        Record::new(key, format!("{}:{}:{}", acc.count, acc.sum, acc.last))
    };
    assert_eq!(
        run_update_and_emit(&input, add_ref, emit),
        run_update_and_emit(&input, add, emit)
    );
}
