//! The pipeline spec: a TOML file describing one pipeline, parsed and validated.
//!
//! [`PipelineSpec::load`] reads a spec file; [`PipelineSpec::parse`] parses text. Either
//! refuses anything it does not understand, with one line naming the place and the
//! reason, e.g. `spec.toml line 12: unknown field `paralelism`, expected one of ...`
//! or `spec.toml line 7: parallelism must be at least 1`. Unknown keys are errors,
//! never ignored. Relative paths are resolved against the spec file's directory; the
//! result holds typed values (`Duration`s, byte counts, absolute paths).
//!
//! # Reference
//!
//! Durations are strings: an integer and a unit, `ms`, `s`, `m` or `h` (`"500ms"`,
//! `"10s"`), at most `"876000h"` (100 years). Sizes are strings: an integer and `B`,
//! `KiB`, `MiB` or `GiB` (`"64MiB"`), at most `"1024GiB"`. Event times are milliseconds
//! since the Unix epoch.
//!
//! ```toml
//! name = "word-count"       # required; [a-z0-9_-]{1,64}: used in file names and
//!                           # Kafka transactional ids
//! parallelism = 2           # subtasks per operator; default 1, 1..=256
//! max_parallelism = 128     # key groups; default 128, parallelism..=32768;
//!                           # cannot change once the pipeline has checkpoints
//! repartition_partitions = 32   # partitions of each keyed step's repartition
//!                           # topic with N > 1 workers, each a range of key
//!                           # groups: at most this many workers share the step;
//!                           # fewer make each transaction cheaper; default 32
//!                           # (at most max_parallelism), or the count of a topic
//!                           # that exists already; 1..=1024, at most
//!                           # max_parallelism; cannot change once the pipeline
//!                           # has checkpoints
//! batch_size = 1024         # records per batch; default 1024, 1..=65536
//! batch_bytes = "16MiB"     # bytes per batch (keys, values, 16 per record): a source
//!                           # cuts its batch once it holds this much (a larger record
//!                           # travels alone); default "16MiB", >= "1KiB"
//! state_dir = ".weir/word-count"   # default ".weir/<name>"
//!
//! [checkpoint]              # optional
//! interval = "1s"           # time between two checkpoint triggers; default "1s", 10ms to 24h
//! timeout = "60s"           # a checkpoint taking longer is abandoned; default "60s", 1s to 1h
//! retain = 3                # complete checkpoints kept; default 3, 2 to 1000
//! dir = "..."               # default "<state_dir>/checkpoints"
//!
//! [limits]                  # per guest instance; optional
//! memory = "64MiB"          # linear memory; default "64MiB", "1MiB" to "4GiB"
//!                           # (all a wasm32 guest can address)
//! call_timeout = "1s"       # CPU deadline per guest call; default "1s", > 0, at most
//!                           # "60s" and shorter than [checkpoint] timeout (a call
//!                           # holds up its task's checkpoints)
//! compile_cpu = "300s"      # CPU time compiling one module may take (in a child
//!                           # process); default "300s", whole seconds, "1s" to "3600s"
//! compile_memory = "4GiB"   # data memory of that child; default "4GiB",
//!                           # "256MiB" to "64GiB"
//!
//! # Sources: at least one. Every source also accepts
//! #   out_of_orderness = "0ms"   # bounded out-of-orderness of its watermarks; default "0ms"
//!
//! [[sources]]
//! type = "generator"        # synthetic records, deterministic from the seed
//! count = 1000000           # required: records in total (over all subtasks)
//! rate = 0                  # records/s over all subtasks; default 0 = unthrottled
//! keys = 1000               # key cardinality: keys "k0".."k999"; default 1000, >= 1
//! key_distribution = "uniform"  # or { zipf = 1.1 }: key "k<r-1>" with probability
//!                           # proportional to 1/r^1.1 (k0 hottest); exponent in (0, 10]
//! value_size = 16           # approximate bytes of the value's "text"; default 16
//! seed = 0                  # default 0
//! start_time = 1700000000000   # event time of record 0, ms; default 1700000000000
//! time_step = "1ms"         # event time advance per record; default "1ms"
//! event_time_skew = "0ms"   # at most this much earlier event time per record,
//!                           # deterministic from the seed; default "0ms"
//! # Every record's event time, from start_time - event_time_skew to
//! # start_time + (count - 1) x time_step, must lie within +-8640000000000000 ms
//! # (about 273,790 years either side of 1970, a JavaScript Date's range).
//! # Record i: key "k<n>", value {"id":i,"key":"k<n>","value":<0..99>,"text":"<words>"}.
//!
//! [[sources]]
//! type = "file"             # lines of a file, or of every file of a directory
//! path = "input/"           # required; a directory's regular files are read in name
//!                           # order (names starting with "." are skipped), file k by
//!                           # subtask k % parallelism
//! format = "lines"          # "lines" (default): value = the line, empty key, time 0
//!                           # "jsonl": value = the line; key and time from fields:
//! key_field = "user"        # jsonl only: top-level field giving the key (a string's
//!                           # text or a number's JSON text; missing or null: empty key)
//! timestamp_field = "ts"    # jsonl only: top-level integer field, event time in ms
//!                           # (missing or not an integer: 0)
//! max_line_bytes = "1MiB"   # longest line (terminator excluded); a longer one fails
//!                           # the run naming the file and line; default "1MiB",
//!                           # >= "1KiB". A path that is a FIFO, device or socket is
//!                           # refused (a directory's such entries are skipped)
//!
//! [[sources]]
//! type = "stdin"            # lines of standard input (at most one stdin source);
//!                           # not replayable, so output is exactly-once only up to
//!                           # a crash; format, key_field, timestamp_field and
//!                           # max_line_bytes as "file" (a pipe is fine here)
//!
//! [[sources]]
//! type = "kafka"            # partitions of Kafka topics, read with read_committed;
//!                           # key and event time are the Kafka record's
//! topic = "clicks"          # required (or topics = ["a", "b"]); must exist
//! bootstrap = "host:9092"   # default: $KAFKA_BOOTSTRAP
//! group = "weir.<name>"     # consumer group the sink commits offsets to; default
//!                           # "<transactional_prefix><pipeline name>": the Kafka
//!                           # sinks' prefix ("weir." without one) namespaces it
//! start = "committed"       # "earliest", "latest" or "committed" (the group's offsets,
//!                           # else earliest); only without a checkpoint to resume from
//! bounded = false           # true: stop at the end offsets seen at start
//! rate = 0                  # records/s over all subtasks; default 0 = unthrottled
//! connect_timeout = "10s"   # bound on reaching the broker at start
//! buffer_bytes = "4MiB"     # records fetched ahead per subtask, split over its
//!                           # partitions (about 256 bytes of bookkeeping counted per
//!                           # record; one fetch of up to buffer_bytes / 2 in flight
//!                           # on top); default "4MiB", "256KiB" to "1GiB"
//! security = { protocol = "sasl_ssl", mechanism = "SCRAM-SHA-512", username = "a",
//!              password_env = "WEIR_KAFKA_PASSWORD" }
//!                           # optional; how every client of the connector connects:
//!                           # protocol "plaintext" (default without the table),
//!                           # "ssl", "sasl_plaintext" or "sasl_ssl"; with SASL,
//!                           # mechanism "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512",
//!                           # username, and exactly one of password_env (a variable's
//!                           # name) or password_file (a file holding the password;
//!                           # one trailing line break dropped); ca = "ca.pem": the
//!                           # PEM CA certificates to trust (ssl, sasl_ssl only).
//!                           # Paths are relative to the spec; the password is read
//!                           # when the pipeline starts and never logged or shown
//!
//!
//! # Steps: zero or more (at most 64), applied in order. Steps naming the same
//! # module file share one loaded copy of it.
//!
//! [[steps]]
//! type = "map"              # map, filter and flat-map in one guest function
//! module = "guests/filter.wasm"   # required; the guest component, must exist
//! name = "clicks-only"      # optional; [a-z0-9_-]{1,64}, unique among steps
//! config = { field = "kind", equals = "click" }   # optional; string values only,
//!                                                 # handed to the guest
//!
//! [[steps]]
//! type = "aggregate"        # keyed aggregate, state in RocksDB
//! module = "guests/count.wasm"    # required
//! name = "count"            # optional
//! key_field = "user"        # optional: key by this top-level JSON field of the value
//!                           # (as key_field above) instead of the record's key
//! window = { type = "tumbling", size = "10s" }    # optional; or
//!          # { type = "hopping", size = "10s", slide = "5s" } (slide divides size,
//!          # and size / slide, the windows each record is in, is at most 1000);
//!          # without a window, results are emitted on every update
//! allowed_lateness = "0ms"  # default "0ms"; only with a window; later records go to
//!                           # the dead-letter output
//! cache_bytes = "64MiB"     # accumulators cached in memory per subtask, in bytes:
//!                           # an entry of at most 30 bytes of key and value counts 48,
//!                           # a larger one 64 plus its bytes (so the default holds
//!                           # about 1.4 million small ones); default "64MiB", >= "1KiB";
//! cache_entries = 100000    # optional, >= 1: a bound in entries too; default none;
//!                           # past either bound those not used recently are written
//!                           # back to RocksDB and dropped;
//!                           # write-backs not yet in RocksDB hold at most as much again,
//!                           # a checkpoint's copy being made about as much again
//! max_accumulator_bytes = "1MiB"  # largest accumulator the guest may return; a larger
//!                           # one fails the run naming the module and key;
//!                           # default "1MiB", >= "1KiB"
//! config = { }              # optional, as for map
//! on_error = "fail"         # optional, as for map: a failed update call is retried
//!                           # per (record, window), each alone with its accumulator;
//!                           # "dead-letter" refuses the ones that fail alone
//!
//! # Sinks: at least one; every sink receives every output record.
//!
//! [[sinks]]
//! type = "file"             # exactly-once: files appear when their checkpoint commits
//! path = "out/"             # required; a directory, created if missing; files are
//!                           # named <pipeline>-<sink>-<task>-<checkpoint>.txt|.jsonl
//! format = "value"          # "value" (default): the value bytes and "\n"
//!                           # "json": {"key": <text or null>, "value": <text>,
//!                           #          "timestamp": <ms>} per line
//!
//! [[sinks]]
//! type = "stdout"           # at-least-once, for demos; format as "file"
//!
//! [[sinks]]
//! type = "kafka"            # record key, value and event time to a Kafka topic
//! topic = "counts"          # required; must exist
//! bootstrap = "host:9092"   # default: $KAFKA_BOOTSTRAP
//! delivery = "exactly-once" # or "at-least-once"; default "exactly-once": the output
//!                           # of checkpoint n commits in one transaction with it
//! transactional_prefix = "weir."  # transactional ids {prefix}{name}.0.{0|1}; not empty
//! transaction_timeout = "5m"      # must exceed checkpoint interval + timeout +
//!                           # restart_budget, and not exceed the broker's
//!                           # transaction.max.timeout.ms
//! restart_budget = "30s"    # default "30s"
//! connect_timeout = "10s"   # bound on reaching the broker at start
//! buffer_bytes = "8MiB"     # records not yet acknowledged by the broker, over the
//!                           # sink's producers (two exactly-once, one at-least-once,
//!                           # an even share each; ~256 bytes counted per record); a
//!                           # full queue makes the sink wait; default "8MiB",
//!                           # "2MiB" to "1GiB"
//! security = { ... }        # optional; as for a kafka source
//! # Every Kafka sink of a pipeline must agree on bootstrap, delivery,
//! # transactional_prefix, transaction_timeout, restart_budget, buffer_bytes and
//! # security: they share one transaction per checkpoint, so output to all their
//! # topics commits atomically.
//!
//! [dead_letter]             # optional: records refused by a guest, or too late
//! path = "dlq/"             # default "<state_dir>/dead-letter"; one JSON object per
//!                           # line: operator, reason, key, value, timestamp
//! ```
pub mod checks;
mod did_you_mean;
pub mod error;
pub mod pipeline;
pub mod sink;
pub mod source;
pub mod step;
mod tagged;
pub mod units;
pub mod workers;

#[cfg(test)]
mod tests;

pub use error::{InvalidField, SpecError};
pub use pipeline::{CheckpointSpec, DeadLetterSpec, GuestLimitsSpec, PipelineSpec};
pub use sink::SinkSpec;
pub use source::{SourceConfig, SourceSpec};
pub use step::{AggregateStep, MapStep, OnError, StepSpec, WindowSpec};
pub use workers::WorkerSpecError;
