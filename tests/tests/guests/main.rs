//! End-to-end tests of guests as users write them: hostile ones the sandbox contains,
//! Python and JavaScript guests against their Rust twins, every example guest soaked
//! over millions of records, and the toolkit (`weir new`, `weir build`, `weir test`)
//! from an empty directory. Needs `make guests` (Python and JavaScript toolchains); the
//! Kafka cases in `python` and `javascript` need the test run's broker
//! (`KAFKA_BOOTSTRAP`: without it they fail saying so).

mod doc_commands;
mod hostile;
mod javascript;
mod python;
mod soak;
mod toolkit;
