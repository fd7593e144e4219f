// What a user function may return, appended to an output batch.
//
// Invariants:
// - `null` emits nothing (a filter); an array emits each element in order (a flat-map);
//   an object with any of `key`, `value`, `timestamp` (a `Record` or a plain object)
//   emits one record. `key` and `value` are strings (UTF-8 encoded) or Uint8Arrays,
//   missing means empty; a missing `timestamp` takes `naturalTime`.
// - `undefined` is refused with a TypeError: it is nearly always a forgotten `return`,
//   and dropping every record silently would hide it. Return `null` to drop a record.
// - Nothing half-written stays behind: on any TypeError the caller truncates the output
//   back to its mark.

import { describe } from './framing.js';
import { Record } from './record.js';

/** Appends `result` to `out` (a BatchWriter); `naturalTime` for a record without one. */
export function pushResult(out, result, naturalTime, what) {
  if (result === null) return;
  // The common case first, without a call: one Record (its own class, not a subclass).
  if (typeof result === 'object' && result.constructor === Record) {
    const time = result.timestamp;
    out.push(result.key, result.value, time === undefined || time === null ? naturalTime : time);
    return;
  }
  if (Array.isArray(result)) {
    for (let i = 0; i < result.length; i++) {
      const record = result[i];
      if (record === null || typeof record !== 'object' || Array.isArray(record)) {
        throw new TypeError(`${what} returned an array whose element ${i} is ${describe(record)}, not a record`);
      }
      pushRecord(out, record, naturalTime);
    }
    return;
  }
  if (result === undefined) {
    throw new TypeError(`${what} returned undefined (return null to emit nothing)`);
  }
  if (typeof result !== 'object') {
    throw new TypeError(`${what} returned ${describe(result)}, not a record, null or an array of records`);
  }
  pushRecord(out, result, naturalTime);
}

function pushRecord(out, record, naturalTime) {
  const time = record.timestamp;
  out.push(record.key, record.value, time === undefined || time === null ? naturalTime : time);
}
