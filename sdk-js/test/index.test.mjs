// The SDK's public surface: the exports' shapes, log and config through the host
// interfaces, and the sandbox shim.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as weir from '../src/index.js';
import { configured, logged } from './host-stub.mjs';

test('map and aggregate give frozen export objects and refuse what is not a guest', () => {
  const mapper = weir.map((r) => r);
  assert.deepEqual(Object.keys(mapper), ['map']);
  assert.ok(Object.isFrozen(mapper));
  const aggregator = weir.aggregate({ initial: 0, update: (n) => n + 1, emit: () => null });
  assert.deepEqual(Object.keys(aggregator), ['update', 'emit']);
  assert.throws(() => weir.map('nope'), /needs a function/);
  assert.throws(() => weir.aggregate({ initial: 0, emit: () => null }), /needs an `update` function/);
  assert.throws(() => weir.aggregate({ initial: 0, update: () => 1 }), /needs an `emit` function/);
});

test('log writes one line per call at its level; config reads the step config', () => {
  weir.log.info('seen', 3, { a: 1 });
  weir.log.error('bad');
  assert.deepEqual(logged.slice(-2), [
    ['info', 'seen 3 {"a":1}'],
    ['error', 'bad'],
  ]);
  configured.set('field', 'value');
  assert.equal(weir.config('field'), 'value');
  assert.equal(weir.config('missing'), undefined);
  assert.equal(weir.config('missing', 'fallback'), 'fallback');
});

test('fetch rejects with a TypeError saying there is no network, and cannot be put back', async () => {
  await assert.rejects(fetch('http://127.0.0.1:9/'), (error) => error instanceof TypeError && error.message.includes(weir.NO_NETWORK));
  assert.throws(() => {
    globalThis.fetch = async () => 'a working fetch';
  }, TypeError);
  assert.throws(() => Object.defineProperty(globalThis, 'fetch', { value: () => 1 }), TypeError);
});

test('Record: keeps strings as given (UTF-8 on output), with() copies, valueJson refuses bad JSON', () => {
  const r = new weir.Record('k', 'é', 5);
  assert.equal(r.value, 'é');
  assert.equal(r.valueText, 'é');
  const out = weir.map(() => r).map({ timestamps: new BigInt64Array([1n]), keyEnds: new Uint32Array([0]), keys: new Uint8Array(0), valueEnds: new Uint32Array([0]), values: new Uint8Array(0) });
  assert.deepEqual(Array.from(out.records.values), [0xc3, 0xa9]);
  assert.deepEqual(Array.from(out.records.keys), [0x6b]);
  assert.deepEqual(Array.from(out.records.timestamps), [5n]);
  assert.equal(new weir.Record(new Uint8Array([0xef, 0xbb, 0xbf, 0x61])).keyText, '\ufeffa');
  assert.throws(() => new weir.Record('', new Uint8Array([0xef, 0xbf, 0xbd, 0xff])).valueText, { name: 'TypeError', message: 'value is not UTF-8' });
  assert.equal(new weir.Record('', new Uint8Array([0xef, 0xbf, 0xbd])).valueText, '\ufffd');
  assert.equal(r.with({ value: 'x' }).keyText, 'k');
  assert.equal(r.with({ value: 'x' }).timestamp, 5);
  assert.deepEqual(new weir.Record('', '{"a":1}').valueJson(), { a: 1 });
  assert.throws(() => new weir.Record('', '{').valueJson(), { name: 'SyntaxError', message: /value is not valid JSON/ });
});
