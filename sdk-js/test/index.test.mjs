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

test('Record: strings become UTF-8, with() copies, valueJson refuses bad JSON', () => {
  const r = new weir.Record('k', 'é', 5);
  assert.deepEqual(Array.from(r.value), [0xc3, 0xa9]);
  assert.equal(r.with({ value: 'x' }).keyText, 'k');
  assert.equal(r.with({ value: 'x' }).timestamp, 5);
  assert.deepEqual(new weir.Record('', '{"a":1}').valueJson(), { a: 1 });
  assert.throws(() => new weir.Record('', '{').valueJson(), { name: 'SyntaxError', message: /value is not valid JSON/ });
});
