// Host-side test harness: a guest's `map` or `aggregate` export driven under Node as the
// runtime drives it, over plain records, for a project's own unit tests
// (`import { runMap, runAggregate } from 'weir-guest/testing'`).
//
// Invariants:
// - The export is called through the contract (one record-batch, or one group-batch
//   then one emit-batch), so a test sees what the runtime would: the same framing, the
//   same rejections, the same natural timestamps.
// - A record is given as a `Record`, `[key, value, timestamp]` or
//   `{ key, value, timestamp }` (strings or bytes; timestamp ms, default 0); output
//   records come back as `Record`s, timestamps as the SDK gives them (a Number, a
//   BigInt only beyond 2^53 ms).
// - `runAggregate` groups the records by key in first-seen order, folds each group from
//   no accumulator (one window) and emits every key once; a rejection's `index` is the
//   record's index in the input, as `runMap`'s is.

import { BatchReader, BatchWriter, ColumnWriter } from './framing.js';
import { Record } from './record.js';

const encoder = new TextEncoder();

function asRecord(input, index) {
  if (input instanceof Record) return input;
  if (Array.isArray(input)) return new Record(input[0], input[1], input[2] ?? 0);
  if (input !== null && typeof input === 'object') return new Record(input.key, input.value, input.timestamp ?? 0);
  throw new TypeError(`weir-guest/testing: record ${index} is not a Record, an array or an object`);
}

function batchOf(records) {
  const out = new BatchWriter(records.length);
  for (const record of records) out.push(record.key, record.value, record.timestamp ?? 0);
  return out.finish();
}

function recordsOf(batch) {
  const reader = new BatchReader(batch);
  return Array.from(
    { length: reader.length },
    (_, i) => new Record(reader.key(i).slice(), reader.value(i).slice(), reader.timestamp(i)),
  );
}

/**
 * Runs `map` (a guest's `map` export) over `records`:
 * `{ records: Record[], rejections: [{ index, reason }] }`.
 */
export async function runMap(map, records) {
  const output = await map.map(batchOf(records.map(asRecord)));
  return { records: recordsOf(output.records), rejections: output.rejections };
}

/** `records` grouped by key bytes, first-seen order: [{ key, members: [input index] }]. */
function groupByKey(records) {
  const groups = new Map();
  records.forEach((record, index) => {
    const key = typeof record.key === 'string' ? encoder.encode(record.key) : record.key;
    const id = key.join(',');
    let group = groups.get(id);
    if (group === undefined) {
      group = { key, members: [] };
      groups.set(id, group);
    }
    group.members.push(index);
  });
  return [...groups.values()];
}

/**
 * Runs `aggregate` (a guest's `aggregate` export) over `records` as one window
 * (`{ start, end }` in ms, or `null`, unwindowed): every key's records folded from no
 * accumulator, then every key emitted once, in first-seen order:
 * `{ records: Record[], rejections: [{ index, reason }] }`.
 */
export async function runAggregate(aggregate, records, { window = null } = {}) {
  const inputs = records.map(asRecord);
  const groups = groupByKey(inputs);
  const order = groups.flatMap((g) => g.members);
  const recordEnds = new Uint32Array(groups.length);
  groups.reduce((end, g, i) => (recordEnds[i] = end + g.members.length), 0);
  const updated = await aggregate.update({
    accumulatorEnds: new Uint32Array(groups.length),
    accumulators: new Uint8Array(0),
    recordEnds,
    records: batchOf(order.map((i) => inputs[i])),
  });
  const keys = new ColumnWriter(groups.length);
  for (const g of groups) keys.push(g.key);
  const span = window === null ? undefined : { start: BigInt(window.start), end: BigInt(window.end) };
  const emitted = await aggregate.emit({
    keyEnds: keys.finishEnds(),
    keys: keys.finishBytes(),
    windows: groups.map(() => span),
    accumulatorEnds: updated.accumulatorEnds,
    accumulators: updated.accumulators,
  });
  const rejections = updated.rejections.map(({ index, reason }) => ({ index: order[index], reason }));
  return { records: recordsOf(emitted), rejections };
}
