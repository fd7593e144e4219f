// runMap, the `map` export's loop: map, filter, flat-map, refusals (with their partial
// output discarded), async functions in order, and the natural event time.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runMap } from '../src/mapper.js';
import { Record } from '../src/record.js';
import { batchOf, readBatch } from './helpers.mjs';

const input = batchOf([
  ['k0', 'hello', 10],
  ['', 'drop me', 11],
  ['k2', 'a b c', 12],
  ['k3', 'bad', 13],
]);

function sync(record) {
  const text = record.valueText;
  if (text === 'drop me') return null;
  if (text === 'bad') throw new Error('refused: bad');
  if (text.includes(' ')) return text.split(' ').map((w) => new Record(w, w));
  return record.with({ value: text.toUpperCase() });
}

const expected = {
  records: [
    ['k0', 'HELLO', 10n],
    ['a', 'a', 12n],
    ['b', 'b', 12n],
    ['c', 'c', 12n],
  ],
  rejections: [{ index: 3, reason: 'refused: bad' }],
};

const read = (output) => ({ records: readBatch(output.records), rejections: output.rejections });

test('map, filter, flat-map and a refusal, synchronously', () => {
  const output = runMap(input, sync);
  assert.equal(typeof output.then, 'undefined', 'a synchronous function gives a plain value');
  assert.deepEqual(read(output), expected);
});

test('async functions give the same output, in input order, through one promise', async () => {
  let delay = 4;
  const slowFirst = async (record) => {
    await new Promise((resolve) => setTimeout(resolve, delay--));
    return sync(record);
  };
  const output = runMap(input, slowFirst);
  assert.equal(typeof output.then, 'function');
  assert.deepEqual(read(await output), expected);
});

test('a mix: sync until the first promise, then async; a rejected promise refuses its record', async () => {
  const mixed = (record) => (record.valueText === 'a b c' ? Promise.resolve(sync(record)) : record.valueText === 'bad' ? Promise.reject(new TypeError('refused: bad')) : sync(record));
  assert.deepEqual(read(await runMap(input, mixed)), expected);
});

test("a refused record's partial output is discarded; undefined and non-records are refused", () => {
  const batch = batchOf([
    ['', 'x', 1],
    ['', 'y', 2],
    ['', 'z', 3],
    ['', 'w', 4],
  ]);
  const output = runMap(batch, (record) => {
    switch (record.valueText) {
      case 'x':
        return [new Record('', 'ok-x'), { value: 42 }];
      case 'y':
        return undefined;
      case 'z':
        return 'just a string';
      default:
        return { value: 'ok-w', timestamp: 99 };
    }
  });
  assert.deepEqual(readBatch(output.records), [['', 'ok-w', 99n]]);
  assert.deepEqual(
    output.rejections.map((r) => r.index),
    [0, 1, 2],
  );
  assert.match(output.rejections[0].reason, /a key or value must be a string or a Uint8Array/);
  assert.match(output.rejections[1].reason, /returned undefined \(return null to emit nothing\)/);
  assert.match(output.rejections[2].reason, /returned string/);
});

test('invalid UTF-8 refuses the record through valueText; bytes pass through untouched', () => {
  const batch = batchOf([
    ['', new Uint8Array([0x61, 0xff, 0x62]), 1],
    ['', 'fine', 2],
  ]);
  const output = runMap(batch, (record) => record.with({ value: record.valueText }));
  assert.deepEqual(output.rejections, [{ index: 0, reason: 'value is not UTF-8' }]);
  const raw = runMap(batch, (record) => record);
  assert.deepEqual(Array.from(raw.records.values.subarray(0, 3)), [0x61, 0xff, 0x62]);
});

test('timestamps: inherited when absent, exact as BigInts beyond 2^53', () => {
  const big = 2n ** 62n + 1n;
  const batch = batchOf([
    ['', 'a', big],
    ['', 'b', -7],
  ]);
  const output = runMap(batch, (record) => ({ key: record.key, value: record.value }));
  assert.deepEqual(Array.from(output.records.timestamps), [big, -7n]);
});

test('a timestamp outside s64 refuses its record instead of wrapping', () => {
  const batch = batchOf([
    ['', 'a', 1],
    ['', 'b', 2],
    ['', 'c', 3],
  ]);
  const times = [2n ** 63n, 5n, 2 ** 63];
  const output = runMap(batch, (record) => ({ value: record.value, timestamp: times[record.timestamp - 1] }));
  assert.deepEqual(Array.from(output.records.timestamps), [5n]);
  assert.deepEqual(output.rejections.map((r) => r.index), [0, 2]);
  assert.match(output.rejections[0].reason, /must fit in 64 bits/);
});

test('an empty batch maps to an empty batch', () => {
  const output = runMap(batchOf([]), () => {
    throw new Error('not called');
  });
  assert.deepEqual(read(output), { records: [], rejections: [] });
});
