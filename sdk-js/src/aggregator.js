// The `aggregate` exports: `update` folds each group's records into its accumulator,
// `emit` turns accumulators into output records. One call per batch each.
//
// Invariants:
// - An accumulator is the user's value serialised with JSON.stringify, as UTF-8. An
//   EMPTY byte string is the contract's "no accumulator yet": the group starts from
//   `initial` (a fresh value each time: `initial()` when it is a function, else a deep
//   copy of the JSON value given).
// - `update(acc, record)` returns the new accumulator, or `undefined` to keep `acc`
//   (mutated in place). A record for which it throws (or rejects) is refused (dead-letter
//   output, index into `groups.records`) and must not have changed `acc`: return a new
//   value, or check first and mutate after. Records of a group fold in order.
// - A group whose records were all refused (or that had none) gets its input accumulator
//   back byte for byte, so "none yet" stays empty and a refused record never changes
//   state.
// - An accumulator is only plain objects (prototype Object.prototype or null), arrays,
//   strings, finite numbers, booleans and null, nested. Anything JSON.stringify would
//   drop or change (a Map or Set, written as {}; NaN or Infinity, written as null; an
//   undefined property or array element; a BigInt; a Date or other class instance; a
//   function; a cycle) is refused by `checkAccumulator` before it is written, and
//   `initial` is checked when the aggregate is defined.
// - Stored bytes that do not parse as JSON, or an accumulator that is refused, are not a
//   record's fault: the call traps, the pipeline fails and restarts from its
//   checkpoint, nothing is silently rewritten or lost.
// - `emit(key, window, acc)` returns what a map returns (record, null, array); `key` is a
//   Uint8Array view, `window` `{start, end}` (ms) or null when unwindowed. A throw there
//   traps: the contract's emit has no rejection. A record without a timestamp gets
//   `window.end - 1`, or 0 unwindowed (what the runtime stamps on window output).

import { BatchReader, BatchWriter, ColumnWriter, FramingError, checkEnds, frame, ownRealm, toTime } from './framing.js';
import { drive, isThenable } from './drive.js';
import { reasonOf } from './mapper.js';
import { pushResult } from './output.js';
import { Record, TRUSTED, utf8 } from './record.js';

/** The accumulator factory of `initial` (a function, or a JSON value copied each time). */
export function initialFactory(initial) {
  if (typeof initial === 'function') return initial;
  if (initial === undefined) {
    throw new TypeError('weir-guest: aggregate({ initial, update, emit }) needs `initial` (a JSON value or a function)');
  }
  try {
    checkAccumulator(initial, 'initial');
  } catch (error) {
    throw new TypeError(`weir-guest: \`initial\` does not serialise as JSON: ${reasonOf(error)}`);
  }
  const json = JSON.stringify(initial);
  return () => JSON.parse(json);
}

/**
 * Throws a TypeError naming the first part of `value` that JSON would not give back as
 * it is (see the invariants above); `path` names `value` in the message.
 */
export function checkAccumulator(value, path = 'the accumulator', ancestors = new Set()) {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return;
    case 'number':
      if (Number.isFinite(value)) return;
      throw new TypeError(`${path} is ${value}, which JSON writes as null`);
    case 'object': {
      if (value === null) return;
      if (ancestors.has(value)) throw new TypeError(`${path} is a cycle`);
      const isArray = Array.isArray(value);
      const proto = Object.getPrototypeOf(value);
      if (!isArray && proto !== Object.prototype && proto !== null) {
        const name = value.constructor?.name ?? 'object';
        throw new TypeError(`${path} is a ${name}, which JSON does not give back (use a plain object or array)`);
      }
      ancestors.add(value);
      if (isArray) {
        for (let i = 0; i < value.length; i++) checkAccumulator(value[i], `${path}[${i}]`, ancestors);
      } else {
        for (const key of Object.keys(value)) checkAccumulator(value[key], `${path}.${key}`, ancestors);
      }
      ancestors.delete(value);
      return;
    }
    default: {
      const what = { bigint: 'a BigInt', undefined: 'undefined' }[typeof value] ?? `a ${typeof value}`;
      throw new TypeError(`${path} is ${what}, which JSON does not store`);
    }
  }
}

/** Decodes an accumulator; empty bytes are "none yet". Throws (traps) on bad bytes. */
export function decodeAccumulator(bytes, fresh, whose) {
  if (bytes.length === 0) return fresh();
  let text;
  try {
    text = utf8(bytes, 'accumulator');
    return JSON.parse(text);
  } catch (error) {
    throw new Error(
      `weir-guest: the accumulator of ${whose()} does not decode as JSON: ${reasonOf(error)} ` +
        '(was this state written by another version of the guest?)',
    );
  }
}

function encodeAccumulator(column, acc, whose) {
  try {
    checkAccumulator(acc);
  } catch (error) {
    throw new TypeError(`weir-guest: the accumulator of ${whose} does not serialise as JSON: ${reasonOf(error)}`);
  }
  column.appendString(JSON.stringify(acc));
  column.endFrame();
}

/** The contract's update over `groups`: its update-output (or a promise of it). */
export function runUpdate(groups, fresh, update) {
  return drive(updateLoop(groups, fresh, update));
}

function* updateLoop(groups, fresh, update) {
  const accumulatorEnds = ownRealm(Uint32Array, groups.accumulatorEnds);
  const accumulators = ownRealm(Uint8Array, groups.accumulators);
  const recordEnds = ownRealm(Uint32Array, groups.recordEnds);
  const records = new BatchReader(groups.records);
  const groupCount = recordEnds.length;
  if (accumulatorEnds.length !== groupCount) {
    throw new FramingError(`group-batch: ${accumulatorEnds.length} accumulators for ${groupCount} groups`);
  }
  checkEnds(accumulatorEnds, accumulators.length, 'accumulators');
  checkEnds(recordEnds, records.length, 'record-ends');
  if ((groupCount === 0 ? 0 : recordEnds[groupCount - 1]) !== records.length) {
    throw new FramingError(`group-batch: the groups do not cover all ${records.length} records`);
  }
  const out = new ColumnWriter(groupCount, accumulators.length + 8 * groupCount);
  const rejections = [];
  let index = 0;
  for (let g = 0; g < groupCount; g++) {
    const bytes = frame(accumulatorEnds, accumulators, g);
    let acc = decodeAccumulator(bytes, fresh, () => `group ${g} of this batch`);
    let changed = false;
    for (const end = recordEnds[g]; index < end; index++) {
      const record = new Record(records.key(index), records.value(index), records.timestamp(index), TRUSTED);
      try {
        let result = update(acc, record);
        if (result != null && typeof result.then === 'function') result = yield result;
        if (result !== undefined) acc = result;
        changed = true;
      } catch (error) {
        rejections.push({ index, reason: reasonOf(error) });
      }
    }
    if (changed) {
      encodeAccumulator(out, acc, `group ${g} of this batch`);
    } else {
      out.push(bytes);
    }
  }
  return { accumulatorEnds: out.finishEnds(), accumulators: out.finishBytes(), rejections };
}

/** The contract's emit over `entries`: a record-batch (or a promise of it). */
export function runEmit(entries, fresh, emit) {
  return drive(emitLoop(entries, fresh, emit));
}

function* emitLoop(entries, fresh, emit) {
  const { windows } = entries;
  const keyEnds = ownRealm(Uint32Array, entries.keyEnds);
  const keys = ownRealm(Uint8Array, entries.keys);
  const accumulatorEnds = ownRealm(Uint32Array, entries.accumulatorEnds);
  const accumulators = ownRealm(Uint8Array, entries.accumulators);
  const n = windows.length;
  if (keyEnds.length !== n || accumulatorEnds.length !== n) {
    throw new FramingError(`emit-batch: ${keyEnds.length} keys, ${n} windows, ${accumulatorEnds.length} accumulators`);
  }
  checkEnds(keyEnds, keys.length, 'keys');
  checkEnds(accumulatorEnds, accumulators.length, 'accumulators');
  // Typically one small record per entry.
  const out = new BatchWriter(n, keys.length, 64 * n);
  for (let i = 0; i < n; i++) {
    const key = frame(keyEnds, keys, i);
    const window = windows[i] == null ? null : { start: toTime(windows[i].start), end: toTime(windows[i].end) };
    const acc = decodeAccumulator(frame(accumulatorEnds, accumulators, i), fresh, () => `key ${JSON.stringify(new TextDecoder().decode(key))}`);
    let result = emit(key, window, acc);
    if (isThenable(result)) result = yield result;
    const natural = window === null ? 0 : typeof window.end === 'bigint' ? window.end - 1n : window.end - 1;
    pushResult(out, result, natural, 'the emit function');
  }
  return out.finish();
}
