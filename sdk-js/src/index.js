// weir-guest: write a Weir stream-processing step as one JavaScript function.
//
// A guest is an ES module that exports what one world of `weir:transform`
// (wit/weir.wit) exports, built into a WebAssembly component by componentize-js
// (`node sdk-js/tools/build.mjs --world mapper|aggregator -o out.wasm guest.js`):
//
//   import * as weir from 'weir-guest';
//   export const map = weir.map((record) => record.with({ value: record.valueText.toUpperCase() }));
//
//   export const aggregate = weir.aggregate({
//     initial: 0,
//     update: (count, record) => count + 1,
//     emit: (key, window, count) => ({ key, value: String(count) }),
//   });
//
// This module hides the contract: the columnar batches (framing.js), the one call per
// batch (mapper.js, aggregator.js) and the accumulator bytes (JSON).
//
// Invariants:
// - The sandbox shim (sandbox.js) is imported first, so it is in place before any guest
//   code runs: `fetch` rejects with a TypeError.
// - `map(fn)`: fn(record) returns a Record (or a plain {key, value, timestamp}), null
//   (drop it) or an array (zero or more, in order), or a promise of one of those. A
//   throw or a rejected promise refuses that record: it goes to the pipeline's
//   dead-letter output with the error's message, and the batch carries on.
// - `aggregate({initial, update, emit})`: see aggregator.js. The runtime owns the state;
//   the SDK (de)serialises the accumulator as JSON.
// - Both export objects are frozen: what componentize-js binds at build time is what runs.

import './sandbox.js';
import { runEmit, runUpdate, initialFactory } from './aggregator.js';
import { configValue, writeLog } from './host.js';
import { runMap } from './mapper.js';

export { Record, utf8, utf8Lossy, utf8Bytes } from './record.js';
export { NO_NETWORK } from './sandbox.js';

/** The `map` export of a `mapper` guest: `export const map = weir.map(fn)`. */
export function map(fn) {
  if (typeof fn !== 'function') throw new TypeError('weir-guest: map(fn) needs a function');
  return Object.freeze({
    map(batch) {
      return runMap(batch, fn);
    },
  });
}

/** The `aggregate` export of an `aggregator` guest: `export const aggregate = weir.aggregate({...})`. */
export function aggregate({ initial, update, emit } = {}) {
  if (typeof update !== 'function') throw new TypeError('weir-guest: aggregate({ initial, update, emit }) needs an `update` function');
  if (typeof emit !== 'function') throw new TypeError('weir-guest: aggregate({ initial, update, emit }) needs an `emit` function');
  const fresh = initialFactory(initial);
  return Object.freeze({
    update(groups) {
      return runUpdate(groups, fresh, update);
    },
    emit(entries) {
      return runEmit(entries, fresh, emit);
    },
  });
}

/** The step's configuration value `name` (`config = { ... }` in the spec), else `fallback`. */
export function config(name, fallback = undefined) {
  const value = configValue(name);
  return value === undefined ? fallback : value;
}

const format = (parts) => parts.map((p) => (typeof p === 'string' ? p : safeJson(p))).join(' ');

function safeJson(value) {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/** The pipeline's log, tagged with the module's name: `weir.log.info('seen', n)`. */
export const log = Object.freeze({
  trace: (...parts) => writeLog('trace', format(parts)),
  debug: (...parts) => writeLog('debug', format(parts)),
  info: (...parts) => writeLog('info', format(parts)),
  warn: (...parts) => writeLog('warn', format(parts)),
  error: (...parts) => writeLog('error', format(parts)),
});
