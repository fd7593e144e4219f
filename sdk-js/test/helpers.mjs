// Test helpers that build and read the contract's columns WITHOUT the SDK's framing
// code (plain arrays, then typed arrays), so the SDK is checked against an independent
// reading of wit/weir.wit rather than against itself.
const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { ignoreBOM: true });

export const bytes = (x) => (typeof x === 'string' ? enc.encode(x) : x);

/** A byte-string column: { ends: Uint32Array, data: Uint8Array }. */
export function column(items) {
  const parts = items.map(bytes);
  const ends = [];
  let total = 0;
  for (const p of parts) {
    total += p.length;
    ends.push(total);
  }
  const data = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    data.set(p, at);
    at += p.length;
  }
  return { ends: new Uint32Array(ends), data };
}

/** The contract's record-batch of [key, value, timestamp] triples (strings or bytes). */
export function batchOf(records) {
  const keys = column(records.map((r) => r[0]));
  const values = column(records.map((r) => r[1]));
  return {
    timestamps: new BigInt64Array(records.map((r) => BigInt(r[2]))),
    keyEnds: keys.ends,
    keys: keys.data,
    valueEnds: values.ends,
    values: values.data,
  };
}

/** The frames of a column as byte arrays (copies). */
export function frames(ends, data) {
  const out = [];
  let start = 0;
  for (const end of ends) {
    out.push(Array.from(data.slice(start, end)));
    start = end;
  }
  return out;
}

/** A record-batch as [key text, value text, timestamp BigInt] triples. */
export function readBatch(batch) {
  const n = batch.timestamps.length;
  if (batch.keyEnds.length !== n || batch.valueEnds.length !== n) throw new Error('column lengths differ');
  const keys = frames(batch.keyEnds, batch.keys);
  const values = frames(batch.valueEnds, batch.values);
  return Array.from({ length: n }, (_, i) => [
    dec.decode(new Uint8Array(keys[i])),
    dec.decode(new Uint8Array(values[i])),
    batch.timestamps[i],
  ]);
}

/** The contract's group-batch: groups of [accumulator, records]. */
export function groupBatchOf(groups) {
  const accs = column(groups.map((g) => g[0]));
  const all = groups.flatMap((g) => g[1]);
  const recordEnds = [];
  let total = 0;
  for (const g of groups) {
    total += g[1].length;
    recordEnds.push(total);
  }
  return {
    accumulatorEnds: accs.ends,
    accumulators: accs.data,
    recordEnds: new Uint32Array(recordEnds),
    records: batchOf(all),
  };
}

/** The accumulators of an update-output, as text. */
export function accumulatorsOf(output) {
  return frames(output.accumulatorEnds, output.accumulators).map((f) => dec.decode(new Uint8Array(f)));
}

/** The contract's emit-batch of [key, window|undefined, accumulator] triples. */
export function emitBatchOf(entries) {
  const keys = column(entries.map((e) => e[0]));
  const accs = column(entries.map((e) => e[2]));
  return {
    keyEnds: keys.ends,
    keys: keys.data,
    windows: entries.map((e) => (e[1] ? { start: BigInt(e[1].start), end: BigInt(e[1].end) } : undefined)),
    accumulatorEnds: accs.ends,
    accumulators: accs.data,
  };
}
