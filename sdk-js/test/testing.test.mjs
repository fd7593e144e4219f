// The host-side harness (`weir-guest/testing`): a map and an aggregate driven through
// the contract over plain records, rejections indexed into the input.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as weir from '../src/index.js';
import { runAggregate, runMap } from '../src/testing.js';

const texts = (records) => records.map((r) => [r.keyText, r.valueText, r.timestamp]);

test('runMap: outputs in order, a throw refused with its input index', async () => {
  const map = weir.map((record) => {
    if (record.valueText === 'bad') throw new Error('no bad values');
    return [record, record.with({ value: record.valueText + '!' })];
  });
  const { records, rejections } = await runMap(map, [
    ['k', 'a', 5],
    new weir.Record('k', 'bad', 6),
    { key: 'j', value: 'b' },
  ]);
  assert.deepEqual(texts(records), [
    ['k', 'a', 5],
    ['k', 'a!', 5],
    ['j', 'b', 0],
    ['j', 'b!', 0],
  ]);
  assert.deepEqual(rejections, [{ index: 1, reason: 'no bad values' }]);
});

test('runMap: an async map function is awaited', async () => {
  const map = weir.map(async (record) => record.with({ key: 'async' }));
  const { records } = await runMap(map, [['k', 'v', 1]]);
  assert.deepEqual(texts(records), [['async', 'v', 1]]);
});

const sum = weir.aggregate({
  initial: { n: 0, total: 0 },
  update(acc, record) {
    const value = record.valueJson();
    if (typeof value.x !== 'number') throw new TypeError('x is not a number');
    return { n: acc.n + 1, total: acc.total + value.x };
  },
  emit: (key, window, acc) => ({ key, value: JSON.stringify({ window, ...acc }) }),
});

test('runAggregate: folds each key from no accumulator, emits keys in first-seen order', async () => {
  const { records, rejections } = await runAggregate(sum, [
    ['b', '{"x":1}', 1],
    ['a', '{"x":2}', 2],
    ['b', '{"x":"no"}', 3],
    ['b', '{"x":4}', 4],
    [new Uint8Array([0xff]), '{"x":8}', 5],
  ]);
  assert.deepEqual(texts(records.slice(0, 2)), [
    ['b', '{"window":null,"n":2,"total":5}', 0],
    ['a', '{"window":null,"n":1,"total":2}', 0],
  ]);
  assert.deepEqual(Array.from(records[2].key), [0xff]);
  assert.deepEqual(rejections, [{ index: 2, reason: 'x is not a number' }]);
});

test('runAggregate: a window is passed to emit and stamps its end - 1', async () => {
  const { records } = await runAggregate(sum, [['a', '{"x":3}', 7]], { window: { start: 0, end: 10000 } });
  assert.deepEqual(texts(records), [['a', '{"window":{"start":0,"end":10000},"n":1,"total":3}', 9999]]);
});

test('a record that is not a record is refused with its index', async () => {
  await assert.rejects(runMap(weir.map((r) => r), [['k', 'v', 1], 42]), /record 1 is not a Record/);
});
