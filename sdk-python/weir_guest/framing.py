"""The columnar batch framing of `wit/weir.wit`, decoded and encoded.

A batch of N records is five flat columns: `timestamps` (N ints), `key_ends` and
`value_ends` (N exclusive end offsets each) and the concatenated `keys` and `values`
bytes. Record i is `keys[key_ends[i-1]:key_ends[i]]` (with `key_ends[-1] = 0`), the same
for values, and `timestamps[i]`. Accumulator and group framings (`*_ends` over a bytes
column, or over the records) follow the same rule.

Invariants:
- Decoding is one pass of `bytes` slices over the columns (no per-byte Python loop);
  the column lengths are checked, and each column's end offsets are checked to be
  non-decreasing and to end exactly at the data's length (`check_ends`), so a
  malformed batch from the host fails loudly (a trap) rather than shifting records.
- Encoding appends whole records only: `BatchBuilder` keeps the pieces in lists and
  joins each bytes column once, in `finish`, so building a batch is linear in its size.
- Nothing here imports the componentize-py bindings: it runs in plain CPython, where
  the SDK's unit tests exercise it.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field
from typing import Iterator, List, Sequence, Tuple

from .record import BytesLike, as_bytes


@dataclass
class RecordBatch:
    """A record batch with the contract's field names (the bindings' `RecordBatch` has
    the same ones; the SDK reads either by attribute)."""

    timestamps: List[int] = field(default_factory=list)
    key_ends: List[int] = field(default_factory=list)
    keys: bytes = b""
    value_ends: List[int] = field(default_factory=list)
    values: bytes = b""


_S64_MIN, _S64_MAX = -(1 << 63), (1 << 63) - 1  # the contract's timestamps are s64 ms


class FramingError(ValueError):
    """The host sent a batch whose framing does not add up."""


def frames(ends: Sequence[int], data: bytes, what: str) -> Iterator[bytes]:
    """Each frame of `data` delimited by the exclusive end offsets `ends`, in order."""
    check_ends(ends, len(data), what)
    start = 0
    for end in ends:
        yield data[start:end]
        start = end


def check_ends(ends: Sequence[int], total: int, what: str) -> None:
    """`ends` must frame exactly `total` bytes: non-negative, non-decreasing (a slice
    `data[start:end]` with `end < start` would silently be empty), the last (0 when
    there is none) equal to `total`. The order check runs in C (`map(operator.le, ...)`),
    one pass per column per call."""
    last = ends[-1] if ends else 0
    if last != total:
        raise FramingError(f"weir_guest: malformed {what} from the host: ends at {last}, data is {total} long")
    if ends and (ends[0] < 0 or not all(map(operator.le, ends, itertools.islice(ends, 1, None)))):
        start = 0
        for i, end in enumerate(ends):
            if end < start:
                break
            start = end
        raise FramingError(f"weir_guest: malformed {what} from the host: frame {i} spans {start}..{end} of {total}")


def columns(batch) -> Tuple[Sequence[int], Sequence[int], bytes, Sequence[int], bytes]:
    """`batch`'s five columns (timestamps, key ends, keys, value ends, values), checked."""
    timestamps, key_ends, value_ends = batch.timestamps, batch.key_ends, batch.value_ends
    n = len(timestamps)
    if len(key_ends) != n or len(value_ends) != n:
        raise FramingError(
            f"weir_guest: malformed record batch from the host: {n} timestamps, "
            f"{len(key_ends)} key ends, {len(value_ends)} value ends"
        )
    keys, values = batch.keys, batch.values
    check_ends(key_ends, len(keys), "keys")
    check_ends(value_ends, len(values), "values")
    return timestamps, key_ends, keys, value_ends, values


def records(batch) -> Iterator[Tuple[bytes, bytes, int]]:
    """(key, value, timestamp) of each record of `batch`, in order."""
    timestamps, key_ends, keys, value_ends, values = columns(batch)
    k = v = 0
    for timestamp, key_end, value_end in zip(timestamps, key_ends, value_ends):
        yield keys[k:key_end], values[v:value_end], timestamp
        k, v = key_end, value_end


def batch_len(batch) -> int:
    """How many records `batch` holds."""
    return len(batch.timestamps)


class BatchBuilder:
    """Builds one output batch, record by record."""

    __slots__ = ("timestamps", "key_ends", "value_ends", "_keys", "_values", "_key_total", "_value_total")

    def __init__(self) -> None:
        self.timestamps: List[int] = []
        self.key_ends: List[int] = []
        self.value_ends: List[int] = []
        self._keys: List[bytes] = []
        self._values: List[bytes] = []
        self._key_total = 0
        self._value_total = 0

    def push(self, key: BytesLike, value: BytesLike, timestamp: int) -> None:
        """Appends one record; `str` key or value is encoded as UTF-8."""
        if type(key) is not bytes:
            key = as_bytes(key, "key")
        if type(value) is not bytes:
            value = as_bytes(value, "value")
        if type(timestamp) is not int:
            raise TypeError(f"weir_guest: a record's timestamp must be an int, not {type(timestamp).__name__}")
        if not _S64_MIN <= timestamp <= _S64_MAX:
            raise OverflowError(f"weir_guest: a record's timestamp must fit in 64 bits (an s64 of ms), not {timestamp}")
        self.timestamps.append(timestamp)
        if key:
            self._keys.append(key)
            self._key_total += len(key)
        self.key_ends.append(self._key_total)
        if value:
            self._values.append(value)
            self._value_total += len(value)
        self.value_ends.append(self._value_total)

    def __len__(self) -> int:
        return len(self.timestamps)

    def finish(self, make=RecordBatch):
        """The batch, built by `make(timestamps, key_ends, keys, value_ends, values)`."""
        return make(self.timestamps, self.key_ends, b"".join(self._keys), self.value_ends, b"".join(self._values))


class FrameBuilder:
    """Builds one framed bytes column (accumulators): `ends` and the joined bytes."""

    __slots__ = ("ends", "_parts", "_total")

    def __init__(self) -> None:
        self.ends: List[int] = []
        self._parts: List[bytes] = []
        self._total = 0

    def push(self, frame: bytes) -> None:
        if frame:
            self._parts.append(frame)
            self._total += len(frame)
        self.ends.append(self._total)

    def finish(self) -> Tuple[List[int], bytes]:
        return self.ends, b"".join(self._parts)
