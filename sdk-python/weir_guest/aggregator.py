"""`@weir_guest.aggregate(initial=..., emit=...)`: the `aggregate` exports, `update`
(fold each group's records into its accumulator) and `emit` (accumulators to records),
one guest call per batch each.

Invariants:
- Accumulators are the user's value serialised by the SDK as compact JSON: an int,
  finite float, str, bool, None, list or dict with str keys, nested freely, or a
  dataclass (as the dict of its fields, rebuilt with `cls(**fields)`, so its fields
  must be such values). An accumulator that would not come back as it went in (an int
  dict key that JSON turns into a str, a tuple that comes back a list, a set, NaN or
  inf, any other type) is refused when it is encoded, with an error that fails the call
  (a trap): state is never silently changed. `initial` is checked the same way when
  the aggregate is registered. JSON is never empty, so an
  EMPTY accumulator from the runtime always means "no accumulator yet": the fold
  starts from a fresh `initial` (called when it is callable, e.g. `dict` or a dataclass,
  else deep-copied when it is mutable).
- The fold is `fold(acc, record)`; it returns the new accumulator, or `None` to keep
  `acc` as it mutated it in place. An immutable accumulator (int, float, str, bool,
  tuple) must be returned: `None` for one is an error (it would silently drop counts).
- An exception from the fold (`Reject`, or any other `Exception` but `MemoryError`)
  refuses that record (its index in `groups.records`) and must leave the accumulator
  as it was: return a new value, or check before you mutate (the SDK does not copy the
  accumulator per record). A group in which no record was accepted gets its input
  accumulator back byte for byte, so "none yet" stays empty.
- `emit(key, window, acc)` gets the key as `bytes`, the `Window` (or `None` for an
  unwindowed aggregate) and the decoded accumulator, and returns what a map returns;
  an exception from it traps (the contract's emit has no dead-letter route).
- Accumulator bytes that do not decode (state written by another guest) trap: the
  pipeline fails rather than losing or rewriting that state.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, Callable, List, Optional, Tuple

from . import framing
from .framing import BatchBuilder, FrameBuilder
from .mapper import push_output
from .record import Record, Window, reason_of, refuses

_IMMUTABLE = (int, float, str, bool, tuple, type(None), frozenset, bytes)


class AccumulatorCodec:
    """How one aggregate's accumulators are made, encoded and decoded."""

    def __init__(self, initial: Any) -> None:
        if isinstance(initial, type) or (callable(initial) and not dataclasses.is_dataclass(initial)):
            self.fresh: Callable[[], Any] = initial
        elif isinstance(initial, _IMMUTABLE):
            self.fresh = lambda: initial
        else:
            self.fresh = lambda: copy.deepcopy(initial)
        sample = self.fresh()
        self.immutable = isinstance(sample, _IMMUTABLE)
        if dataclasses.is_dataclass(sample):
            cls = type(sample)
            names = [f.name for f in dataclasses.fields(cls)]
            # the fields as they are (not `asdict`, which would turn a nested dataclass
            # into a dict that `cls(**fields)` does not turn back)
            self._to_json = lambda acc: {name: getattr(acc, name) for name in names}
            self._from_json = lambda fields: cls(**fields)
        else:
            self._to_json = None
            self._from_json = None
        self.encode(sample)  # refuses an `initial` that cannot be stored, at registration

    def encode(self, acc: Any) -> bytes:
        """`acc` as compact JSON; raises `TypeError` if it would not decode to an equal value.

        The check is one `json.loads` of the output compared with `acc` (both in C): a
        dict key that JSON stringifies, or a tuple it turns into a list, compares unequal.
        """
        if type(acc) is int:  # the common count: its JSON is its repr, and it round-trips
            return str(acc).encode()
        if self._to_json is not None:
            acc = self._to_json(acc)
        try:
            text = json.dumps(acc, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            round_trips = json.loads(text) == acc
        except (TypeError, ValueError, RecursionError):
            round_trips = False
        if not round_trips:
            raise TypeError(
                f"weir_guest: the accumulator does not round-trip through JSON "
                f"({_not_json(acc, 'acc') or 'it decodes to a different value'}): "
                "use int, finite float, str, bool, None, list and dict with str keys"
            )
        return text.encode("utf-8")

    def decode(self, data: bytes) -> Any:
        if not data:
            return self.fresh()
        try:
            value = json.loads(data)
            return self._from_json(value) if self._from_json is not None else value
        except (ValueError, TypeError) as e:
            raise ValueError(
                f"weir_guest: an accumulator does not decode ({e}): was this state written by "
                "another version of the guest?"
            ) from None


def _not_json(value: Any, path: str) -> Optional[str]:
    """Where and why `value` is not a JSON value that round-trips, or None (error messages only)."""
    kind = type(value)
    if kind is float and (value != value or value in (float("inf"), float("-inf"))):
        return f"{path} is {value!r}"
    if value is None or kind in (bool, int, float, str):
        return None
    if kind is list:
        items = ((f"{path}[{i}]", item) for i, item in enumerate(value))
    elif kind is dict:
        for key in value:
            if type(key) is not str:
                return f"{path} has a {type(key).__name__} key {key!r}"
        items = ((f"{path}[{key!r}]", item) for key, item in value.items())
    else:
        return f"{path} is a {kind.__name__}"
    for where, item in items:
        why = _not_json(item, where)
        if why is not None:
            return why
    return None


class Aggregate:
    """A registered aggregate: its fold, emit function and accumulator codec."""

    def __init__(self, fold: Callable, initial: Any, emit: Callable) -> None:
        self.fold = fold
        self.emit = emit
        self.codec = AccumulatorCodec(initial)

    def update(self, groups) -> Tuple[List[int], bytes, List[Tuple[int, str]]]:
        """Folds every group: (accumulator ends, accumulators, rejections)."""
        record_ends = groups.record_ends
        accumulator_ends = groups.accumulator_ends
        if len(accumulator_ends) != len(record_ends):
            raise framing.FramingError(
                f"weir_guest: malformed group batch from the host: {len(accumulator_ends)} "
                f"accumulators for {len(record_ends)} groups"
            )
        framing.check_ends(record_ends, framing.batch_len(groups.records), "record ends")
        out = FrameBuilder()
        rejections: List[Tuple[int, str]] = []
        fold, codec = self.fold, self.codec
        records = framing.records(groups.records)
        start = 0
        for acc_bytes, end in zip(framing.frames(accumulator_ends, groups.accumulators, "accumulators"), record_ends):
            acc = codec.decode(acc_bytes)
            changed = False
            for index in range(start, end):
                key, value, timestamp = next(records)
                try:
                    result = fold(acc, Record(key, value, timestamp))
                except Exception as error:
                    if not refuses(error):
                        raise
                    rejections.append((index, reason_of(error)))
                    continue
                if result is not None:
                    acc = result
                elif codec.immutable:
                    raise TypeError(
                        f"weir_guest: {getattr(fold, '__name__', 'the fold')} returned None for a "
                        f"{type(acc).__name__} accumulator: return the new value"
                    )
                changed = True
            start = end
            out.push(codec.encode(acc) if changed else acc_bytes)
        ends, data = out.finish()
        return ends, data, rejections

    def emit_all(self, entries) -> BatchBuilder:
        """Each entry's output records, in entry order."""
        windows = entries.windows
        n = len(windows)
        if len(entries.key_ends) != n or len(entries.accumulator_ends) != n:
            raise framing.FramingError(
                f"weir_guest: malformed emit batch from the host: {len(entries.key_ends)} keys, "
                f"{n} windows, {len(entries.accumulator_ends)} accumulators"
            )
        out = BatchBuilder()
        emit, decode = self.emit, self.codec.decode
        name = getattr(emit, "__name__", "the emit function")
        keys = framing.frames(entries.key_ends, entries.keys, "keys")
        accs = framing.frames(entries.accumulator_ends, entries.accumulators, "accumulators")
        for key, window, acc_bytes in zip(keys, windows, accs):
            if window is not None:
                window = Window(window.start, window.end)
            push_output(out, emit(key, window, decode(acc_bytes)), name)
        return out


_registered: Optional[Aggregate] = None


def aggregate(*, initial: Any, emit: Callable[[bytes, Optional[Window], Any], object]):
    """Makes the decorated `fold(acc, record)` this component's aggregate step.

    `initial` is the accumulator of a key with none yet (a value, or a callable making
    one: `dict`, a dataclass); `emit(key, window, acc)` turns an accumulator into output
    records. The decorated function is returned unchanged.
    """
    if not callable(emit):
        raise TypeError("weir_guest.aggregate: emit= must be a function emit(key, window, acc)")

    def register(fold: Callable) -> Callable:
        global _registered
        if _registered is not None and _registered.fold is not fold:
            raise RuntimeError(
                f"weir_guest: one aggregate per component: {_registered.fold.__name__} and {fold.__name__}"
            )
        _registered = Aggregate(fold, initial, emit)
        return fold

    return register


def is_registered() -> bool:
    """Whether a function is decorated with `@aggregate` in this component."""
    return _registered is not None


def registered() -> Aggregate:
    """The aggregate `@aggregate` registered; raises if there is none."""
    if _registered is None:
        raise RuntimeError("weir_guest: no function is decorated with @weir_guest.aggregate in this component")
    return _registered
