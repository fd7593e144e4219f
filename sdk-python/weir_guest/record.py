"""The record a guest function sees, the event-time window of an aggregate, and `Reject`.

Invariants:
- `Record.key` and `Record.value` are `bytes` whenever the SDK hands a record to user
  code; user code may assign `str` (or any bytes-like object) to them, and the SDK
  encodes `str` as UTF-8 when the record is emitted. An empty key means "no key".
- `Record.timestamp` is event time in milliseconds since the Unix epoch (an `int`).
- The `*_str` accessors decode strictly as UTF-8; on invalid bytes they raise `Reject`
  with the same message the Rust SDK gives (`value is not UTF-8: invalid utf-8
  sequence of 1 bytes from index 0`), so an unguarded access refuses that one record
  instead of failing the pipeline.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple, Union

BytesLike = Union[bytes, bytearray, memoryview, str]


class Reject(Exception):
    """Refuses the record being processed: raise it from a map or aggregate function.

    The runtime routes that one input record to the pipeline's dead-letter output with
    the message as its reason; the rest of the batch carries on. Any other `Exception`
    does the same, with `<ExceptionClass>: <message>` as the reason (see `reason_of`);
    `Reject` just says it on purpose and keeps the reason as written.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = str(reason)


class Window(NamedTuple):
    """The event-time window `[start, end)` of an aggregate's accumulator, in ms."""

    start: int
    end: int


def reason_of(error: Exception) -> str:
    """The dead-letter reason for an exception a user function raised."""
    if isinstance(error, Reject):
        return error.reason
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def refuses(error: BaseException) -> bool:
    """Whether `error`, raised by a user function, refuses one record (else it traps).

    Every `Exception` refuses its record, except `MemoryError` (the instance hit its
    memory limit: a fault of the instance, not of the record). `BaseException`s that are
    not `Exception`s (`SystemExit`, `KeyboardInterrupt`) trap.
    """
    return isinstance(error, Exception) and not isinstance(error, MemoryError)


def as_bytes(data: BytesLike, what: str) -> bytes:
    """`data` as `bytes`: `str` is encoded as UTF-8, bytes-like objects are copied."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"weir_guest: a record's {what} must be bytes or str, not {type(data).__name__}")


def utf8_error(part: str, error: UnicodeDecodeError) -> Reject:
    """The Rejection for bytes that are not UTF-8, worded as Rust's `Utf8Error`."""
    if error.reason == "unexpected end of data":
        detail = f"incomplete utf-8 byte sequence from index {error.start}"
    else:
        detail = f"invalid utf-8 sequence of {error.end - error.start} bytes from index {error.start}"
    return Reject(f"{part} is not UTF-8: {detail}")


class Record:
    """One record of the stream: a key, a value and an event time.

    `Record(key, value, timestamp=0)`; `key` and `value` are bytes or str (encoded as
    UTF-8). In a map, edit the input record and return it to keep its key and event
    time: `record.value_str = record.value_str.upper()`.
    """

    __slots__ = ("key", "value", "timestamp")

    def __init__(self, key: BytesLike = b"", value: BytesLike = b"", timestamp: int = 0) -> None:
        self.key = key
        self.value = value
        self.timestamp = timestamp

    @property
    def key_str(self) -> str:
        """The key as text; raises `Reject` if it is not UTF-8. Assignable."""
        key = self.key
        if isinstance(key, str):
            return key
        try:
            return bytes(key).decode("utf-8")
        except UnicodeDecodeError as e:
            raise utf8_error("key", e) from None

    @key_str.setter
    def key_str(self, text: str) -> None:
        self.key = text.encode("utf-8")

    @property
    def value_str(self) -> str:
        """The value as text; raises `Reject` if it is not UTF-8. Assignable."""
        value = self.value
        if isinstance(value, str):
            return value
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            raise utf8_error("value", e) from None

    @value_str.setter
    def value_str(self, text: str) -> None:
        self.value = text.encode("utf-8")

    def json(self) -> Any:
        """The value parsed as JSON; raises `Reject` naming the problem if it is not."""
        try:
            return json.loads(self.value)
        except (ValueError, TypeError) as e:
            raise Reject(f"value is not valid JSON: {e}") from None

    @classmethod
    def from_json(cls, key: BytesLike, value: Any, timestamp: int = 0) -> "Record":
        """A record whose value is `value` as compact JSON (non-ASCII kept as UTF-8)."""
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        return cls(key, text.encode("utf-8"), timestamp)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (
            as_bytes(self.key, "key") == as_bytes(other.key, "key")
            and as_bytes(self.value, "value") == as_bytes(other.value, "value")
            and self.timestamp == other.timestamp
        )

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return f"Record(key={self.key!r}, value={self.value!r}, timestamp={self.timestamp!r})"
