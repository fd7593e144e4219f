"""`uppercase` in Python: the smallest map step, the twin of guest-examples/uppercase.

Each record comes out with its value uppercased (Unicode-aware, `str.upper`), its key
and event time unchanged; a value that is not UTF-8 is rejected to the dead-letter
output (`value_str` raises `weir_guest.Reject`). Build: `make guests`
(-> build/guests/uppercase_py.wasm); run: `weir run guest-examples/python/uppercase/pipeline.toml`.
"""

import weir_guest


@weir_guest.map
def uppercase(record):
    record.value_str = record.value_str.upper()
    return record
