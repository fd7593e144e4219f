// The `map` export: one call per batch, the user function once per record.
//
// Invariants:
// - The input batch is read in place (a Record of subarray views per record); the
//   output is written into one BatchWriter sized from the input.
// - An input record's output and its rejection are exclusive: when the function throws
//   (or its promise rejects, or it returns something that is not a record), whatever it
//   emitted for that record is truncated away and the record is refused with the
//   error's message. Rejections are in input order, each index once.
// - Records are processed strictly in order, one at a time, async functions included.

import { BatchReader, BatchWriter } from './framing.js';
import { drive } from './drive.js';
import { pushResult } from './output.js';
import { Record, TRUSTED } from './record.js';

/** The reason a thrown value gives for refusing a record. */
export function reasonOf(error) {
  if (error instanceof Error) return error.message || error.name;
  return String(error);
}

/** Maps the contract's record-batch with `fn`: the contract's map-output (or a promise of it). */
export function runMap(batch, fn) {
  return drive(mapLoop(new BatchReader(batch), fn));
}

function* mapLoop(input, fn) {
  const n = input.length;
  const out = new BatchWriter(n, input.keys.length, input.values.length);
  const rejections = [];
  for (let i = 0; i < n; i++) {
    const timestamp = input.timestamp(i);
    const record = new Record(input.key(i), input.value(i), timestamp, TRUSTED);
    const mark = out.length;
    try {
      let result = fn(record);
      // `isThenable` without the call (the loop's per-record calls are most of its cost).
      if (result != null && typeof result.then === 'function') result = yield result;
      pushResult(out, result, timestamp, 'the map function');
    } catch (error) {
      out.truncate(mark);
      rejections.push({ index: i, reason: reasonOf(error) });
    }
  }
  return { records: out.finish(), rejections };
}
