;; A plain core WebAssembly module, not a component: the runtime must refuse it at load
;; with a message saying a component built for wasm32-wasip2 is expected. Kept as text
;; for reference (`wasm-tools parse core-module.wat -o core.wasm` compiles it);
;; tests/tests/local/bad_input.rs writes the smallest core module, magic and version, itself.
(module
  (func (export "map") (param i32 i32) (result i32)
    local.get 0)
  (memory (export "memory") 1))
