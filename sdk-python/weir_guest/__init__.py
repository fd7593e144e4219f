"""Write a Weir stream-processing step in Python: one decorated function, built into a
WebAssembly component with componentize-py (`sdk-python/tools/build.py`).

Map, filter, flat-map::

    import weir_guest

    @weir_guest.map
    def uppercase(record):
        record.value_str = record.value_str.upper()
        return record

The function gets each input `Record` (`key` and `value` bytes, `timestamp` in ms,
`key_str` / `value_str` text accessors) and returns a `Record`, `None` (drop it) or a
list of `Record`s. `raise weir_guest.Reject("why")` routes that one input record to the
pipeline's dead-letter output with reason "why"; any other exception does too, with
reason "<ExceptionClass>: <message>" (a non-UTF-8 value read through `value_str`
raises `Reject` with the Rust SDK's wording). A `MemoryError`, or a function returning
anything else than a Record, None or a list of Records, fails the pipeline, which
restarts from its last checkpoint.

Aggregate (a fold over a user accumulator the runtime keeps in its state backend)::

    def emit_count(key, window, count):
        return weir_guest.Record(key, str(count))

    @weir_guest.aggregate(initial=0, emit=emit_count)
    def count(n, record):
        return n + 1

Invariants: the columnar batch framing of `wit/weir.wit` is decoded and encoded here,
never by the user; accumulators are serialised as JSON by the SDK (an empty accumulator
from the runtime means "start from `initial`"); one guest call per batch, the user
function once per record (or per emitted key). `log(level, message)` writes to the
pipeline's log and `config(name)` reads the step's configuration. A guest gets no file,
network or environment: the runtime grants nothing through WASI (see README).
"""

from .aggregator import aggregate
from .framing import RecordBatch
from .host import config, log
from .mapper import map  # noqa: A004 (the decorator's public name)
from .record import Record, Reject, Window

__all__ = ["Record", "RecordBatch", "Reject", "Window", "aggregate", "config", "log", "map"]
__version__ = "0.1.0"
