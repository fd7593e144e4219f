"""`@weir_guest.map`: the `map` export, one guest call per batch and the user function
once per record.

Invariants:
- One map function per component: decorating a second one is an error at build time.
- The function gets a fresh `Record` per input (key and value are `bytes` slices of
  the batch) and returns a `Record` (map), `None` (filter: drop it) or a list or tuple
  of `Record`s (flat-map: zero or more, in order).
- An exception from the function (`Reject`, or any other `Exception` but
  `MemoryError`) refuses that one input record: it becomes a rejection (its index in
  the input batch, the reason, see `record.reason_of`) and contributes no output.
  Output is appended only after the function returned, so a refused record never
  leaves half its output behind. Rejections are in input order, each index once.
- What the function returns that is not a Record, None or a list of Records, and a
  `MemoryError` or a non-`Exception` `BaseException`, trap: the pipeline fails and
  restarts from its last checkpoint (a guest bug, as a panic is in a Rust guest).
"""

from __future__ import annotations

from typing import Callable, List, Optional, Tuple

from . import framing
from .framing import BatchBuilder
from .record import Record, reason_of, refuses

MapFunction = Callable[[Record], object]

_registered: Optional[MapFunction] = None


def map(function: MapFunction) -> MapFunction:  # noqa: A001 (the decorator's public name)
    """Makes `function` this component's map step; returns it unchanged (so it can still
    be called directly, e.g. in a unit test)."""
    global _registered
    if not callable(function):
        raise TypeError("weir_guest.map decorates a function: @weir_guest.map")
    if _registered is not None and _registered is not function:
        raise RuntimeError(
            f"weir_guest: one map function per component: {_registered.__name__} and {function.__name__}"
        )
    _registered = function
    return function


def is_registered() -> bool:
    """Whether a function is decorated with `@map` in this component."""
    return _registered is not None


def registered() -> MapFunction:
    """The function `@map` registered; raises if there is none."""
    if _registered is None:
        raise RuntimeError("weir_guest: no function is decorated with @weir_guest.map in this component")
    return _registered


def push_output(out: BatchBuilder, result: object, what: str) -> None:
    """Appends what a map or emit function returned: a Record, None, or a list/tuple."""
    if result is None:
        return
    if isinstance(result, Record):
        out.push(result.key, result.value, result.timestamp)
        return
    if isinstance(result, (list, tuple)):
        for record in result:
            if not isinstance(record, Record):
                raise TypeError(f"weir_guest: {what} returned a list holding a {type(record).__name__}, not a Record")
        for record in result:
            out.push(record.key, record.value, record.timestamp)
        return
    raise TypeError(
        f"weir_guest: {what} must return a Record, None or a list of Records, not {type(result).__name__}"
    )


def run_map(batch, function: MapFunction) -> Tuple[BatchBuilder, List[Tuple[int, str]]]:
    """Runs `function` over every record of `batch`: the output builder and the
    rejections as (index, reason).

    The loop is written out (no generator, the common result pushed without a call to
    `push_output`): in the guest's interpreter each Python call per record costs about
    as much as the user's function."""
    out = BatchBuilder()
    push = out.push
    rejections: List[Tuple[int, str]] = []
    name = getattr(function, "__name__", "the map function")
    timestamps, key_ends, keys, value_ends, values = framing.columns(batch)
    k = v = 0
    for index, (timestamp, key_end, value_end) in enumerate(zip(timestamps, key_ends, value_ends)):
        try:
            result = function(Record(keys[k:key_end], values[v:value_end], timestamp))
        except Exception as error:
            if not refuses(error):
                raise
            rejections.append((index, reason_of(error)))
        else:
            if type(result) is Record:
                push(result.key, result.value, result.timestamp)
            else:
                push_output(out, result, name)
        k, v = key_end, value_end
    return out, rejections
