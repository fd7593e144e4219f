// `word-count` in JavaScript: a keyed aggregate, the twin of the Rust
// guest-examples/word-count, and byte for byte the same output.
//
// Counts the records of each key (the word, after `split-words` and a key-by), per
// window when the step is windowed. Every record counts: this step never refuses. The
// accumulator is a plain number; the SDK stores it as JSON and the runtime keeps it in
// its state backend, checkpointed, so counts are exactly-once across failures. Each
// emitted record has key = the word and value
//   {"word":"<key>","count":N}                                      (unwindowed)
//   {"word":"<key>","window_start":S,"window_end":E,"count":N}      (windowed)
// with S and E the window's [start, end) in ms since the Unix epoch and event time
// E - 1 (0 unwindowed). A key that is not UTF-8 is written with U+FFFD in place of its
// invalid bytes; the word is escaped as JSON.stringify escapes it, which is exactly the
// Rust guest's escaping (\" \\ \b \f \n \r \t, other controls as \u00xx).
//
// Build: `make js-guests` (-> build/guests/word_count_js.wasm).
// Run:   weir run guest-examples/js/word-count/pipeline.toml

import * as weir from 'weir-guest';

export const aggregate = weir.aggregate({
  initial: 0,
  update: (count) => count + 1,
  emit(key, window, count) {
    const word = JSON.stringify(weir.utf8Lossy(key));
    const value =
      window === null
        ? `{"word":${word},"count":${count}}`
        : `{"word":${word},"window_start":${window.start},"window_end":${window.end},"count":${count}}`;
    // No timestamp: the SDK stamps window.end - 1 (0 unwindowed), as the Rust guest does.
    return { key, value };
  },
});
