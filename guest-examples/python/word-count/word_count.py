"""`word-count` in Python: a keyed aggregate, the twin of guest-examples/word-count.

Counts the records of each key (the word, after `split-words` and a key-by), per
window when the step is windowed; every record counts, nothing is rejected. The runtime
keeps each count (the SDK stores it as JSON, e.g. `3`) in its state backend and
checkpoints it, so counts are exactly-once across failures. Each emitted record has
key = the word, event time = the window's end - 1 (0 unwindowed), and value
  {"word":"<key>","count":N}                                   (unwindowed)
  {"word":"<key>","window_start":S,"window_end":E,"count":N}   (windowed)
byte for byte what the Rust guest writes (a key that is not UTF-8 gets U+FFFD for its
invalid bytes; JSON escapes as serde_json's). Build: `make guests`
(-> build/guests/word_count_py.wasm); run: `weir run guest-examples/python/word-count/pipeline.toml`.
"""

import json

import weir_guest


def emit_count(key, window, count):
    word = {"word": key.decode("utf-8", "replace")}
    if window is not None:
        word["window_start"] = window.start
        word["window_end"] = window.end
    word["count"] = count
    value = json.dumps(word, separators=(",", ":"), ensure_ascii=False)
    return weir_guest.Record(key, value, window.end - 1 if window is not None else 0)


@weir_guest.aggregate(initial=0, emit=emit_count)
def count(n, record):
    return n + 1
