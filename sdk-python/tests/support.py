"""Helpers for the SDK's unit tests: batches in the contract's framing, built by hand
(not by the SDK's own encoder, so the decoder is checked against the WIT text), and a
fresh registry per test."""

import sys
from pathlib import Path
from types import SimpleNamespace

SDK = Path(__file__).resolve().parent.parent
REPO = SDK.parent
if str(SDK) not in sys.path:
    sys.path.insert(0, str(SDK))

from weir_guest import aggregator, mapper  # noqa: E402


def batch(*records):
    """A record batch of (key, value, timestamp) triples, framed per wit/weir.wit."""
    timestamps, key_ends, value_ends, keys, values = [], [], [], b"", b""
    for key, value, timestamp in records:
        keys += key
        values += value
        timestamps.append(timestamp)
        key_ends.append(len(keys))
        value_ends.append(len(values))
    return SimpleNamespace(timestamps=timestamps, key_ends=key_ends, keys=keys, value_ends=value_ends, values=values)


def rows(batch):
    """(key, value, timestamp) triples of a batch, decoded by hand from its framing."""
    out, k, v = [], 0, 0
    for i, timestamp in enumerate(batch.timestamps):
        out.append((batch.keys[k : batch.key_ends[i]], batch.values[v : batch.value_ends[i]], timestamp))
        k, v = batch.key_ends[i], batch.value_ends[i]
    return out


def framed(frames):
    """(ends, data) of a list of byte strings."""
    ends, data = [], b""
    for frame in frames:
        data += frame
        ends.append(len(data))
    return ends, data


def groups(accumulators, record_groups):
    """A group batch: one accumulator (bytes) and a list of records per group."""
    acc_ends, acc_data = framed(accumulators)
    flat, record_ends = [], []
    for records in record_groups:
        flat.extend(records)
        record_ends.append(len(flat))
    return SimpleNamespace(
        accumulator_ends=acc_ends, accumulators=acc_data, record_ends=record_ends, records=batch(*flat)
    )


def entries(items):
    """An emit batch of (key, window or None, accumulator bytes)."""
    key_ends, keys = framed([key for key, _, _ in items])
    acc_ends, accs = framed([acc for _, _, acc in items])
    windows = [None if w is None else SimpleNamespace(start=w[0], end=w[1]) for _, w, _ in items]
    return SimpleNamespace(key_ends=key_ends, keys=keys, windows=windows, accumulator_ends=acc_ends, accumulators=accs)


def reset_registry():
    mapper._registered = None
    aggregator._registered = None
