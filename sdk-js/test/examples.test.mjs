// The JavaScript example guests, run under Node through the SDK: the outputs the Rust
// twins' unit tests pin down (guest-examples/word-count/src/lib.rs), byte for byte.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { map } from '../../guest-examples/js/uppercase/uppercase.js';
import { aggregate } from '../../guest-examples/js/word-count/word-count.js';
import { batchOf, emitBatchOf, groupBatchOf, readBatch } from './helpers.mjs';

test('uppercase: Unicode-aware, key and time kept, invalid UTF-8 refused', () => {
  const output = map.map(
    batchOf([
      ['k', 'hello', 5],
      ['', 'straße ǆ ﬁ', 6],
      ['x', new Uint8Array([0x68, 0xc3]), 7],
      ['', '\ufeffbom kept, \ufffd kept', 8],
    ]),
  );
  assert.deepEqual(readBatch(output.records), [
    ['k', 'HELLO', 5n],
    ['', 'STRASSE Ǆ FI', 6n],
    ['', '\ufeffBOM KEPT, \ufffd KEPT', 8n],
  ]);
  assert.deepEqual(output.rejections, [{ index: 2, reason: 'value is not UTF-8' }]);
});

test('word-count: counts, and emits the documented JSON', () => {
  const updated = aggregate.update(groupBatchOf([['', [['hello', 'hello', 0], ['hello', 'hello', 0], ['hello', 'hello', 0]]]]));
  const count = new TextDecoder().decode(updated.accumulators);
  assert.equal(count, '3');
  const emitted = aggregate.emit(
    emitBatchOf([
      ['hello', undefined, count],
      ['hello', { start: 0, end: 60000 }, count],
    ]),
  );
  assert.deepEqual(readBatch(emitted), [
    ['hello', '{"word":"hello","count":3}', 0n],
    ['hello', '{"word":"hello","window_start":0,"window_end":60000,"count":3}', 59999n],
  ]);
});

test('word-count: a key is escaped as the Rust guest escapes it, invalid UTF-8 replaced', () => {
  const key = new Uint8Array([...new TextEncoder().encode('say "hi"\\\n\u0001\u007f'), 0xff]);
  const emitted = aggregate.emit(emitBatchOf([[key, undefined, '2']]));
  assert.equal(new TextDecoder().decode(emitted.values), '{"word":"say \\"hi\\"\\\\\\n\\u0001\u007f\ufffd","count":2}');
  assert.deepEqual(Array.from(emitted.keys), Array.from(key));
});
