// The columnar framing: what the writer produces reads back (through the independent
// reader of helpers.mjs) exactly, across buffer growth, truncation and odd inputs; what
// the reader accepts is exactly a well-formed frame.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import vm from 'node:vm';
import { BatchReader, BatchWriter, FramingError, fromTime, toTime } from '../src/framing.js';
import { batchOf, readBatch } from './helpers.mjs';

test('written records read back, empty keys and values included, past every initial capacity', () => {
  const out = new BatchWriter(1, 1, 1);
  const expected = [];
  for (let i = 0; i < 1000; i++) {
    const key = i % 3 === 0 ? '' : `k${i}`;
    const value = i % 5 === 0 ? '' : 'ü'.repeat(i % 17) + 'v'.repeat(i);
    out.push(key, i % 2 === 0 ? value : new TextEncoder().encode(value), i - 500);
    expected.push([key, value, BigInt(i - 500)]);
  }
  const batch = out.finish();
  assert.deepEqual(readBatch(batch), expected);
  // Exact lengths: views as long as the data, not the grown buffers.
  assert.equal(batch.timestamps.length, 1000);
  assert.equal(batch.keyEnds[999], batch.keys.length);
  assert.equal(batch.valueEnds[999], batch.values.length);
});

test('truncate drops whole records, and writing resumes after the mark', () => {
  const out = new BatchWriter();
  out.push('a', 'one', 1);
  const mark = out.mark();
  out.push('b', 'two', 2);
  out.push('c', 'three', 3);
  out.truncate(mark);
  out.push('d', 'four', 4);
  assert.deepEqual(readBatch(out.finish()), [
    ['a', 'one', 1n],
    ['d', 'four', 4n],
  ]);
});

test('a bad value or time leaves nothing of its record behind', () => {
  const out = new BatchWriter();
  out.push('a', 'one', 1);
  assert.throws(() => out.push('b', 42, 2), TypeError);
  assert.throws(() => out.push('b', 'x', 1.5), TypeError);
  assert.throws(() => out.push('b', 'x', 'soon'), TypeError);
  // BigInt64Array would wrap these silently: 2^63 reads back as -2^63
  assert.throws(() => out.push('b', 'x', 2n ** 63n), /must fit in 64 bits/);
  assert.throws(() => out.push('b', 'x', -(2n ** 63n) - 1n), /must fit in 64 bits/);
  assert.throws(() => out.push('b', 'x', 2n ** 64n + 5n), /must fit in 64 bits/);
  for (const bad of [2 ** 63, -(2 ** 64), 2 ** 53, NaN, Infinity, -0.5]) {
    assert.throws(() => out.push('b', 'x', bad), /must be an integer number of ms/, String(bad));
  }
  out.push('c', 'edge', 2n ** 63n - 1n);
  out.push('d', 'edge', -(2n ** 63n));
  assert.deepEqual(readBatch(out.finish()), [['a', 'one', 1n], ['c', 'edge', 2n ** 63n - 1n], ['d', 'edge', -(2n ** 63n)]]);
});

test('the reader gives views into the batch, no copies', () => {
  const batch = batchOf([
    ['k1', 'hello', 7],
    ['', 'world', -3],
  ]);
  const reader = new BatchReader(batch);
  assert.equal(reader.length, 2);
  assert.equal(reader.value(1).buffer, batch.values.buffer);
  assert.equal(new TextDecoder().decode(reader.value(1)), 'world');
  assert.equal(reader.key(1).length, 0);
  assert.equal(reader.timestamp(1), -3);
});

test('times through the 32-bit halves: every range boundary reads and writes back exactly', () => {
  const times = [0n, 1n, -1n, 2n ** 32n - 1n, 2n ** 32n, -(2n ** 32n), -(2n ** 32n) - 1n, 1700000000000n, -1700000000000n,
    2n ** 53n - 1n, -(2n ** 53n - 1n), 2n ** 53n, -(2n ** 53n), -(2n ** 53n) + 1n, 2n ** 63n - 1n, -(2n ** 63n)];
  const reader = new BatchReader(batchOf(times.map((t) => ['', '', t])));
  const out = new BatchWriter(1);
  times.forEach((t, i) => {
    const read = reader.timestamp(i);
    assert.equal(read, toTime(t), `reading ${t}`);
    assert.equal(typeof read, Number.isSafeInteger(Number(t)) ? 'number' : 'bigint', `type of ${t}`);
    out.push('', '', read);
  });
  assert.deepEqual(Array.from(out.finish().timestamps), times);
});

test('times: Numbers while exact, BigInts beyond, never rounded', () => {
  assert.equal(toTime(1700000000000n), 1700000000000);
  assert.equal(toTime(2n ** 53n - 1n), 2 ** 53 - 1);
  assert.equal(toTime(2n ** 53n), 2n ** 53n);
  assert.equal(toTime(-(2n ** 63n)), -(2n ** 63n));
  assert.equal(fromTime(toTime(2n ** 63n - 1n)), 2n ** 63n - 1n);
  assert.equal(fromTime(-5), -5n);
});

test('malformed frames from the host are FramingErrors naming the column', () => {
  const good = batchOf([['k', 'v', 0]]);
  assert.throws(() => new BatchReader({ ...good, values: new Uint8Array(0) }), {
    name: 'FramingError',
    message: /`values` column: frame 0 spans 0..1 of 0/,
  });
  assert.throws(() => new BatchReader({ ...good, keyEnds: new Uint32Array([2, 1]) }), FramingError);
  assert.throws(() => new BatchReader({ ...good, timestamps: new BigInt64Array(2) }), /malformed record-batch/);
});

// componentize-js hands a call's columns over as typed arrays of another realm, for which
// `instanceof Uint8Array` is false (and a writer took a slow path for every record).
// Node's `vm` makes such arrays: the reader's views must be this realm's all the same.
test('columns of another realm are read as this realm\'s typed arrays', () => {
  const good = batchOf([['k', 'value', 7], ['', 'w', -1]]);
  const foreign = vm.runInNewContext(
    `({ timestamps: new BigInt64Array(t), keyEnds: new Uint32Array(ke), keys: new Uint8Array(k),
        valueEnds: new Uint32Array(ve), values: new Uint8Array(v) })`,
    { t: [...good.timestamps], ke: [...good.keyEnds], k: [...good.keys], ve: [...good.valueEnds], v: [...good.values] },
  );
  assert.equal(foreign.keys instanceof Uint8Array, false, 'the test makes foreign arrays');
  const reader = new BatchReader(foreign);
  assert.ok(reader.key(0) instanceof Uint8Array);
  assert.ok(reader.value(1) instanceof Uint8Array);
  assert.equal(new TextDecoder().decode(reader.value(0)), 'value');
  assert.deepEqual([reader.timestamp(0), reader.timestamp(1)], [7, -1]);
});
