// runUpdate and runEmit, the `aggregate` exports' loops: JSON accumulators, "none yet",
// untouched groups byte for byte, refusals, async folds, and emit's natural times.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { initialFactory, runEmit, runUpdate } from '../src/aggregator.js';
import { accumulatorsOf, emitBatchOf, groupBatchOf, readBatch } from './helpers.mjs';

const sum = (acc, record) => {
  const n = Number(record.valueText);
  if (!Number.isInteger(n)) throw new Error(`not an integer: ${record.valueText}`);
  return { sum: acc.sum + n, seen: [...acc.seen, n] };
};
const fresh = initialFactory({ sum: 0, seen: [] });

test('empty accumulators start from initial; records fold in order; JSON out', () => {
  const groups = groupBatchOf([
    ['', [['a', '1', 0], ['a', '2', 0]]],
    ['{"sum":10,"seen":[10]}', [['b', '5', 0]]],
  ]);
  const output = runUpdate(groups, fresh, sum);
  assert.deepEqual(accumulatorsOf(output), ['{"sum":3,"seen":[1,2]}', '{"sum":15,"seen":[10,5]}']);
  assert.deepEqual(output.rejections, []);
});

test('refused records do not change state; a group with nothing folded is returned byte for byte', () => {
  const stored = '{ "sum" : 4, "seen": [4] }'; // not how JSON.stringify writes it
  const groups = groupBatchOf([
    ['', [['a', 'x', 0]]],
    [stored, [['b', 'y', 0]]],
    [stored, []],
    ['{"sum":1,"seen":[1]}', [['c', 'z', 0], ['c', '2', 0]]],
  ]);
  const output = runUpdate(groups, fresh, sum);
  assert.deepEqual(accumulatorsOf(output), ['', stored, stored, '{"sum":3,"seen":[1,2]}']);
  assert.deepEqual(output.rejections, [
    { index: 0, reason: 'not an integer: x' },
    { index: 1, reason: 'not an integer: y' },
    { index: 2, reason: 'not an integer: z' },
  ]);
});

test('an update may mutate in place and return undefined; initial is a fresh copy per group', () => {
  const groups = groupBatchOf([
    ['', [['a', '1', 0]]],
    ['', [['b', '2', 0]]],
  ]);
  const output = runUpdate(groups, fresh, (acc, record) => {
    acc.seen.push(record.valueText);
  });
  assert.deepEqual(accumulatorsOf(output), ['{"sum":0,"seen":["1"]}', '{"sum":0,"seen":["2"]}']);
});

test('an async update gives the same accumulators', async () => {
  const groups = groupBatchOf([
    ['', [['a', '1', 0], ['a', 'no', 0], ['a', '2', 0]]],
  ]);
  const output = await runUpdate(groups, fresh, async (acc, record) => sum(acc, record));
  assert.deepEqual(accumulatorsOf(output), ['{"sum":3,"seen":[1,2]}']);
  assert.deepEqual(output.rejections, [{ index: 1, reason: 'not an integer: no' }]);
});

test('stored bytes that are not JSON, or an accumulator that does not serialise, trap', () => {
  assert.throws(() => runUpdate(groupBatchOf([['\u0000postcard', [['a', '1', 0]]]]), fresh, sum), /does not decode as JSON.*another version of the guest/);
  assert.throws(() => runUpdate(groupBatchOf([['', [['a', '1', 0]]]]), () => 0, () => 10n), /does not serialise as JSON/);
  assert.throws(() => initialFactory(undefined), /needs `initial`/);
});

test('an accumulator JSON would drop or change traps, naming the part', () => {
  // JSON.stringify writes a Map or Set as {}, NaN and Infinity as null, leaves undefined
  // properties out and throws on a BigInt: the state would be silently lost
  const cyclic = { a: [] };
  cyclic.a.push(cyclic);
  const cases = [
    [new Map([['a', 1]]), /the accumulator is a Map/],
    [{ seen: new Set([1]) }, /the accumulator\.seen is a Set/],
    [{ n: NaN }, /the accumulator\.n is NaN, which JSON writes as null/],
    [[1, -Infinity], /the accumulator\[1\] is -Infinity/],
    [{ sum: 1, last: undefined }, /the accumulator\.last is undefined/],
    [[1, , 3], /the accumulator\[1\] is undefined/], // eslint-disable-line no-sparse-arrays
    [{ big: 10n }, /the accumulator\.big is a BigInt/],
    [{ at: new Date(0) }, /the accumulator\.at is a Date/],
    [{ f: () => 1 }, /the accumulator\.f is a function/],
    [cyclic, /the accumulator\.a\[0\] is a cycle/],
  ];
  for (const [acc, why] of cases) {
    assert.throws(
      () => runUpdate(groupBatchOf([['', [['a', '1', 0]]]]), () => 0, () => acc),
      (error) => error instanceof TypeError && /accumulator of group 0 of this batch does not serialise as JSON/.test(error.message) && why.test(error.message),
      String(why),
    );
  }
  assert.throws(() => initialFactory({ seen: new Set() }), /`initial` does not serialise as JSON: initial\.seen is a Set/);
  assert.throws(() => initialFactory(NaN), /initial is NaN/);
});

test('plain objects (also null-prototype), arrays, strings, finite numbers, booleans and null are stored', () => {
  const acc = Object.assign(Object.create(null), { n: -1.5, s: 'é', b: true, z: null, l: [1, [2, 'x']], o: { k: {} } });
  const output = runUpdate(groupBatchOf([['', [['a', '1', 0]]]]), () => 0, () => acc);
  assert.deepEqual(accumulatorsOf(output), ['{"n":-1.5,"s":"é","b":true,"z":null,"l":[1,[2,"x"]],"o":{"k":{}}}']);
});

test('emit: one call per entry with key bytes, window and accumulator; natural times', () => {
  const entries = emitBatchOf([
    ['w1', { start: 0, end: 60000 }, '3'],
    ['w2', undefined, ''],
    ['w3', { start: 60000, end: 120000 }, '5'],
  ]);
  const seen = [];
  const batch = runEmit(entries, () => 0, (key, window, count) => {
    seen.push([new TextDecoder().decode(key), window, count]);
    if (count === 5) return [{ key, value: 'a' }, { key, value: 'b', timestamp: 1 }];
    return { key, value: String(count) };
  });
  assert.deepEqual(seen, [
    ['w1', { start: 0, end: 60000 }, 3],
    ['w2', null, 0],
    ['w3', { start: 60000, end: 120000 }, 5],
  ]);
  assert.deepEqual(readBatch(batch), [
    ['w1', '3', 59999n],
    ['w2', '0', 0n],
    ['w3', 'a', 119999n],
    ['w3', 'b', 1n],
  ]);
});

test('a throw in emit traps (the contract has no rejection there)', () => {
  assert.throws(() => runEmit(emitBatchOf([['k', undefined, '1']]), () => 0, () => { throw new Error('boom'); }), /boom/);
});
