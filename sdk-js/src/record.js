// `Record`: one record as a guest author sees it, and the UTF-8 helpers.
//
// Invariants:
// - An input record's `key` and `value` are Uint8Array VIEWS of the input batch (no
//   copy); they are valid for the call that received them, and writing into them is
//   allowed (the input batch is not reused) but never reaches the host. A record the
//   guest builds keeps what it was given, a Uint8Array or a string (encoded as UTF-8
//   once, straight into the output batch, when it is emitted).
// - `key` is empty when the record has no key; `value` may be empty too.
// - `timestamp` is the event time in ms since the Unix epoch: a Number for every time a
//   JavaScript Date can hold (all the runtime produces), a BigInt beyond that, never a
//   rounded value. `undefined` on an OUTPUT record means "the natural time": the input
//   record's for a map, `window.end - 1` (or 0 unwindowed) for an aggregate's emit.
// - `keyText` / `valueText` decode strictly: invalid UTF-8 throws a TypeError, which in a
//   map or update function refuses the record (dead-letter output) like Rust's `?`.
//   `utf8Lossy` replaces invalid sequences with U+FFFD exactly as Rust's
//   `String::from_utf8_lossy` does (both follow the WHATWG decoder).

import { toBytes } from './framing.js';

// ignoreBOM: a leading U+FEFF is text like any other (the WHATWG default strips it;
// Rust's from_utf8 keeps it, and so must a guest's output). Both Node and the guest's
// engine honour it.
const lossy = new TextDecoder('utf-8', { ignoreBOM: true });
const strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const encoder = new TextEncoder();

/** `bytes` (or a string, returned as it is) as text, invalid UTF-8 replaced by U+FFFD. */
export function utf8Lossy(bytes) {
  return typeof bytes === 'string' ? bytes : lossy.decode(bytes);
}

/** `bytes` (or a string, returned as it is) as text; throws a TypeError naming `what` if they are not UTF-8. */
export function utf8(bytes, what = 'bytes') {
  if (typeof bytes === 'string') return bytes;
  // The lossy decoder is several times cheaper than the fatal one in the guest's
  // engine; without a U+FFFD in its result nothing was replaced, so the bytes were
  // valid UTF-8. Only text with a U+FFFD (real or replaced) is decoded again, strictly.
  const text = lossy.decode(bytes);
  if (text.indexOf('\ufffd') === -1) return text;
  try {
    return strict.decode(bytes);
  } catch {
    throw new TypeError(`${what} is not UTF-8`);
  }
}

/** `text` as UTF-8 bytes. */
export function utf8Bytes(text) {
  return encoder.encode(text);
}

/**
 * Passed by the SDK's own loops as a Record's fourth argument: `key` and `value` are
 * already what `asData` would make of them (input views, or a copy's kept fields), so
 * they are stored as they are, without two calls. Not exported to guests.
 */
export const TRUSTED = Symbol('weir-guest trusted record');

export class Record {
  /**
   * @param {Uint8Array|string|null|undefined} key   empty when absent; kept as given
   * @param {Uint8Array|string|null|undefined} value empty when absent; kept as given
   * @param {number|bigint|undefined} timestamp      ms; undefined: the natural time
   */
  constructor(key, value, timestamp, trusted = undefined) {
    if (trusted === TRUSTED) {
      this.key = key;
      this.value = value;
    } else {
      this.key = asData(key);
      this.value = asData(value);
    }
    this.timestamp = timestamp;
  }

  /** The key as text (strict UTF-8: throws a TypeError, refusing the record). */
  get keyText() {
    // `utf8`, its common case inlined (one call fewer per record).
    const key = this.key;
    if (typeof key === 'string') return key;
    const text = lossy.decode(key);
    return text.indexOf('\ufffd') === -1 ? text : utf8(key, 'key');
  }

  /** The value as text (strict UTF-8: throws a TypeError, refusing the record). */
  get valueText() {
    const value = this.value;
    if (typeof value === 'string') return value;
    const text = lossy.decode(value);
    return text.indexOf('\ufffd') === -1 ? text : utf8(value, 'value');
  }

  /** The value parsed as JSON (throws a SyntaxError on bad JSON, refusing the record). */
  valueJson() {
    const text = this.valueText;
    try {
      return JSON.parse(text);
    } catch (error) {
      throw new SyntaxError(`value is not valid JSON: ${error.message}`);
    }
  }

  /** A copy with some of `key`, `value`, `timestamp` replaced. */
  with(changes) {
    // Kept fields are valid already; a changed string needs no check either.
    let key = this.key;
    if ('key' in changes) key = typeof changes.key === 'string' ? changes.key : asData(changes.key);
    let value = this.value;
    if ('value' in changes) value = typeof changes.value === 'string' ? changes.value : asData(changes.value);
    const timestamp = 'timestamp' in changes ? changes.timestamp : this.timestamp;
    return new Record(key, value, timestamp, TRUSTED);
  }
}

function asData(data) {
  if (data === undefined || data === null) return new Uint8Array(0);
  if (typeof data === 'string' || data instanceof Uint8Array) return data;
  if (ArrayBuffer.isView(data) || data instanceof ArrayBuffer) return toBytes(data);
  throw new TypeError('a key or value must be a string or a Uint8Array');
}
