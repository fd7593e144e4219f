// `uppercase` in JavaScript: the smallest map step, the twin of the Rust
// guest-examples/uppercase, and byte for byte the same output.
//
// Each record comes out with its value uppercased (Unicode-aware, `toUpperCase`, the
// same full case mapping as Rust's `str::to_uppercase`), its key and event time
// unchanged; a value that is not UTF-8 is refused to the dead-letter output
// (`valueText` throws a TypeError, which refuses the record).
//
// Build: `make js-guests` (-> build/guests/uppercase_js.wasm), or by hand:
//   node sdk-js/tools/build.mjs --world mapper -o uppercase_js.wasm guest-examples/js/uppercase/uppercase.js
// Run:   weir run guest-examples/js/uppercase/pipeline.toml

import * as weir from 'weir-guest';

export const map = weir.map((record) => record.with({ value: record.valueText.toUpperCase() }));
