// The columnar framing of the contract (wit/weir.wit), in plain JavaScript: no host
// imports, so it runs and is tested under Node too.
//
// Invariants:
// - A list of N byte strings travels as `ends` (a Uint32Array: exclusive end offset of
//   each string) plus `bytes` (a Uint8Array): string i is bytes[ends[i-1] .. ends[i]],
//   with ends[-1] = 0. A record-batch is two such columns (keys, values) plus
//   `timestamps` (a BigInt64Array); componentize-js hands the columns over as typed
//   arrays, camelCased (`keyEnds`, `valueEnds`).
// - Reading never copies: a frame is a `subarray` view of its column. Writing copies each
//   byte string once, with `TypedArray.set` (or `TextEncoder.encodeInto` for a string)
//   into buffers that grow by doubling; there is no per-byte JavaScript loop anywhere.
// - Times in +-2^53 ms go through the 32-bit halves of the BigInt64Array columns, never
//   through a BigInt (an allocation that costs an interpreted guest more than the rest
//   of a record); only times beyond that range are BigInts.
// - Input comes from the trusted runtime; a malformed frame is a host bug, so it throws
//   a FramingError naming the column, which the SDK lets escape: the call traps.
// - Output columns are `subarray` views of the grown buffers, exactly as long as the data.

/** A malformed frame from the host: never a user error, the call traps. */
export class FramingError extends Error {
  constructor(message) {
    super(`weir-guest: malformed ${message} from the host`);
    this.name = 'FramingError';
  }
}

const EMPTY_BYTES = new Uint8Array(0);
const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const encoder = new TextEncoder();
const hasEncodeInto = typeof encoder.encodeInto === 'function';

/**
 * Checks that `ends` frames `total` bytes: non-decreasing, the last end within `total`.
 * One pass over the Uint32Array, done once per column per call.
 */
export function checkEnds(ends, total, column) {
  let start = 0;
  for (let i = 0; i < ends.length; i++) {
    const end = ends[i];
    if (end < start || end > total) {
      throw new FramingError(`\`${column}\` column: frame ${i} spans ${start}..${end} of ${total}`);
    }
    start = end;
  }
}

/** Frame i of an `ends` + `bytes` column (checked by `checkEnds`), a view. */
export function frame(ends, bytes, i) {
  const start = i === 0 ? 0 : ends[i - 1];
  const end = ends[i];
  return start === end ? EMPTY_BYTES : bytes.subarray(start, end);
}

/**
 * `array` as a `Type` of this realm: itself if it is one, else a copy (one native copy).
 * componentize-js hands a call's columns over as typed arrays of another realm, for
 * which (and for every view of which) `instanceof Uint8Array` is false.
 */
export function ownRealm(Type, array) {
  if (array instanceof Type) return array;
  const copy = new Type(array.length);
  copy.set(array);
  return copy;
}

/** A record-batch from the host, checked once, read in place. */
export class BatchReader {
  constructor(batch) {
    const timestamps = ownRealm(BigInt64Array, batch.timestamps);
    const keyEnds = ownRealm(Uint32Array, batch.keyEnds);
    const keys = ownRealm(Uint8Array, batch.keys);
    const valueEnds = ownRealm(Uint32Array, batch.valueEnds);
    const values = ownRealm(Uint8Array, batch.values);
    const n = timestamps.length;
    if (keyEnds.length !== n || valueEnds.length !== n) {
      throw new FramingError(
        `record-batch: ${n} timestamps, ${keyEnds.length} key ends, ${valueEnds.length} value ends`,
      );
    }
    checkEnds(keyEnds, keys.length, 'keys');
    checkEnds(valueEnds, values.length, 'values');
    this.length = n;
    this.timestamps = timestamps;
    // The same times as 32-bit halves (little-endian, as wasm and every Node host are):
    // reading a BigInt64Array element allocates a BigInt, which costs a guest's
    // interpreter more than the rest of a record.
    this.timeWords = new Int32Array(timestamps.buffer, timestamps.byteOffset, 2 * n);
    this.keyEnds = keyEnds;
    this.keys = keys;
    this.valueEnds = valueEnds;
    this.values = values;
  }

  // `frame`, inlined: one call per field instead of two.
  key(i) {
    const ends = this.keyEnds;
    const start = i === 0 ? 0 : ends[i - 1];
    const end = ends[i];
    return start === end ? EMPTY_BYTES : this.keys.subarray(start, end);
  }

  value(i) {
    const ends = this.valueEnds;
    const start = i === 0 ? 0 : ends[i - 1];
    const end = ends[i];
    return start === end ? EMPTY_BYTES : this.values.subarray(start, end);
  }

  /** Record i's event time: see `toTime`. */
  timestamp(i) {
    const hi = this.timeWords[2 * i + 1];
    // |t| < 2^53: a safe integer, computed from the halves without a BigInt.
    if (hi >= -0x1fffff && hi <= 0x1fffff) return hi * 4294967296 + (this.timeWords[2 * i] >>> 0);
    return toTime(this.timestamps[i]);
  }
}

/**
 * An s64 time as JavaScript: a Number when it is a safe integer (every time in
 * +-(2^53 - 1) ms, i.e. every date a JavaScript Date can hold), else the BigInt itself,
 * so no time is ever rounded.
 */
export function toTime(big) {
  const n = Number(big);
  return Number.isSafeInteger(n) ? n : big;
}

/**
 * A time (Number or BigInt) as the BigInt the contract carries (an s64). Throws a
 * TypeError on a BigInt outside s64 (BigInt64Array would wrap it silently), and on a
 * Number that is not a safe integer (not an integer, or beyond +-(2^53 - 1), where it
 * may already have been rounded: pass a BigInt there).
 */
export function fromTime(time) {
  if (typeof time === 'bigint') {
    if (BigInt.asIntN(64, time) !== time) {
      throw new TypeError(`a timestamp must fit in 64 bits (an s64 of ms), not ${time}n`);
    }
    return time;
  }
  if (!Number.isSafeInteger(time)) {
    throw new TypeError(`a timestamp must be an integer number of ms (or a BigInt), not ${String(time)}`);
  }
  return BigInt(time);
}

/** A byte column being written: `ends` + `bytes`, both grown by doubling. */
export class ColumnWriter {
  constructor(frames = 16, bytes = 256) {
    this.ends = new Uint32Array(Math.max(frames, 4));
    this.count = 0;
    this.bytes = new Uint8Array(Math.max(bytes, 64));
    this.used = 0;
  }

  reserve(extra) {
    const need = this.used + extra;
    if (need <= this.bytes.length) return;
    if (need > 0xffffffff) throw new RangeError('weir-guest: an output column exceeds 4 GiB');
    let size = this.bytes.length * 2;
    while (size < need) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.bytes.subarray(0, this.used));
    this.bytes = grown;
  }

  growEnds() {
    const grown = new Uint32Array(this.ends.length * 2);
    grown.set(this.ends);
    this.ends = grown;
  }

  endFrame() {
    if (this.count === this.ends.length) this.growEnds();
    this.ends[this.count++] = this.used;
  }

  /** Appends raw bytes (no frame end). */
  appendBytes(bytes) {
    this.reserve(bytes.length);
    this.bytes.set(bytes, this.used);
    this.used += bytes.length;
  }

  /** Appends a string as UTF-8 (no frame end), encoded straight into the buffer. */
  appendString(text) {
    if (hasEncodeInto) {
      // UTF-8 takes at most 3 bytes per UTF-16 code unit.
      const most = text.length * 3;
      if (this.used + most > this.bytes.length) this.reserve(most);
      this.used += encoder.encodeInto(text, this.bytes.subarray(this.used)).written;
    } else {
      this.appendBytes(encoder.encode(text));
    }
  }

  /**
   * Appends `data` (Uint8Array, string, or null/undefined for empty) as one frame.
   * The two common cases (a string, a Uint8Array) make no JavaScript call but the
   * native copy: in the guest's interpreter each call costs about as much as copying a
   * record's bytes.
   */
  push(data) {
    if (typeof data === 'string') {
      if (data.length !== 0) this.appendString(data);
    } else if (data instanceof Uint8Array) {
      const length = data.length;
      if (length !== 0) {
        const used = this.used;
        if (used + length > this.bytes.length) this.reserve(length);
        this.bytes.set(data, used);
        this.used = used + length;
      }
    } else if (data === undefined || data === null) {
      // An empty frame.
    } else if (ArrayBuffer.isView(data) || data instanceof ArrayBuffer) {
      this.appendBytes(toBytes(data));
    } else {
      throw new TypeError(
        `a key or value must be a string or a Uint8Array, not ${describe(data)}`,
      );
    }
    if (this.count === this.ends.length) this.growEnds();
    this.ends[this.count++] = this.used;
  }

  /** Where the column stands, for `truncate`. */
  mark() {
    return this.count;
  }

  /** Drops every frame after `mark`. */
  truncate(mark) {
    this.count = mark;
    this.used = mark === 0 ? 0 : this.ends[mark - 1];
  }

  finishEnds() {
    return this.ends.subarray(0, this.count);
  }

  finishBytes() {
    return this.bytes.subarray(0, this.used);
  }
}

/** A record-batch being written. */
export class BatchWriter {
  constructor(records = 16, keyBytes = 64, valueBytes = 256) {
    this.timestamps = new BigInt64Array(Math.max(records, 4));
    this.timeWords = new Int32Array(this.timestamps.buffer);
    this.keys = new ColumnWriter(records, keyBytes);
    this.values = new ColumnWriter(records, valueBytes);
    this.length = 0;
  }

  /** Appends one record; `timestamp` a Number or a BigInt (see `fromTime`). */
  push(key, value, timestamp) {
    // A safe integer, tested without a call (`% 1` is 0 only for integers; NaN and the
    // infinities fail it).
    const safe =
      typeof timestamp === 'number' && timestamp % 1 === 0 && timestamp <= MAX_SAFE && timestamp >= -MAX_SAFE;
    const big = safe ? 0n : fromTime(timestamp);
    if (this.length === this.timestamps.length) this.growTimes();
    const mark = this.length;
    try {
      this.keys.push(key);
      this.values.push(value);
    } catch (error) {
      this.truncate(mark);
      throw error;
    }
    const at = this.length++;
    if (safe) {
      // Two 32-bit halves, no BigInt: lo = t mod 2^32 (ToUint32 of an integer), hi the
      // rest, exact for every safe integer; Int32Array keeps lo's bits.
      const lo = timestamp >>> 0;
      this.timeWords[2 * at] = lo;
      this.timeWords[2 * at + 1] = (timestamp - lo) / 4294967296;
    } else {
      this.timestamps[at] = big;
    }
  }

  growTimes() {
    const grown = new BigInt64Array(this.timestamps.length * 2);
    grown.set(this.timestamps);
    this.timestamps = grown;
    this.timeWords = new Int32Array(grown.buffer);
  }

  mark() {
    return this.length;
  }

  /** Drops every record after `mark`. */
  truncate(mark) {
    this.length = mark;
    this.keys.truncate(Math.min(mark, this.keys.count));
    this.values.truncate(Math.min(mark, this.values.count));
  }

  /** The contract's record-batch. */
  finish() {
    return {
      timestamps: this.timestamps.subarray(0, this.length),
      keyEnds: this.keys.finishEnds(),
      keys: this.keys.finishBytes(),
      valueEnds: this.values.finishEnds(),
      values: this.values.finishBytes(),
    };
  }
}

/** Any ArrayBuffer or view as a Uint8Array over the same bytes. */
export function toBytes(data) {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** A short description of a value, for error messages. */
export function describe(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return `an object (${value.constructor?.name ?? 'Object'})`;
  return `${typeof value} ${String(value).slice(0, 40)}`;
}
