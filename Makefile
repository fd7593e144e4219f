# Weir: every entry point. `make demo` runs the main job; `make test` runs every test.
# Both install what they need on a fresh Debian machine (run as root or with sudo).

SHELL := /bin/bash
.DEFAULT_GOAL := help

# Build outputs live outside the clone so that reruns on the same machine are
# incremental (RocksDB's C++ alone is ~12 minutes cold on 2 cores).
export CARGO_TARGET_DIR ?= $(HOME)/.cache/weir/target
GUEST_TARGET_DIR ?= $(HOME)/.cache/weir/guest-target
GUESTS_DIR := $(CURDIR)/build/guests
export WEIR_GUESTS_DIR := $(GUESTS_DIR)
WEIR := $(CARGO_TARGET_DIR)/debug/weir
KAFKA := bash scripts/kafka/kafka.sh
# Three KRaft nodes, replication 3, min ISR 2, transaction.version 2: the failover tests.
KAFKA_CLUSTER := bash scripts/kafka/cluster.sh
# moto's S3 server (PyPI, pinned in the script, venv outside the clone): object-store checkpoints.
S3 := bash scripts/s3/s3.sh
# schemathesis (PyPI), pinned, in a venv outside the clone: fuzzes `weir serve`'s API.
VENV ?= $(HOME)/.cache/weir/venv
SCHEMATHESIS_VERSION := 4.32.5
export WEIR_SCHEMATHESIS := $(VENV)/bin/schemathesis

# python3-venv: the venvs of componentize-py, moto and schemathesis (Debian's python3 has no ensurepip).
DEBIAN_PACKAGES := cmake libclang-dev libcurl4-openssl-dev libssl-dev pkg-config build-essential python3-venv
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: help setup build guests rust-guests test test-fast check soak demo demo-kafka demo-serve bench kafka-up kafka-down clean fuzz-tools
.PHONY: s3-up s3-down k8s-tools
.PHONY: docs
.PHONY: image image-check

help:
	@echo "make demo       run the demo pipeline (generator -> WASM map -> windowed WASM aggregate -> exactly-once files)"
	@echo "make demo-kafka the same words through Kafka: topic -> WASM -> exactly-once topic (own broker)"
	@echo "make demo-serve the hosting walk-through: weir serve, a tenant, modules pushed and a pipeline run with the CLI"
	@echo "make test       run every test (starts and stops its own Kafka broker)"
	@echo "make test-fast  unit and in-process tests only: no broker, S3 server, Python or Node (minutes)"
	@echo "make check      the house rules CI gates: cargo fmt --check, clippy -D warnings on every target"
	@echo "make soak       every example guest over 10,000,000 records: exact output, flat guest memory"
	@echo "make bench      run the benchmarks, write build/bench.json and build/kafka-bench.json"
	@echo "make docs       build the book (docs/, mdBook) into build/book/"
	@echo "make guests     build the example and test guests to build/guests/*.wasm"
	@echo "make kafka-up / kafka-down   a local single-node Kafka (KRaft) on 127.0.0.1"
	@echo "make s3-up / s3-down         a local S3-compatible server (moto) on 127.0.0.1"
	@echo "make image      the container image, without Docker: build/image/weir-<version>.tar (deploy/kubernetes runs it)"

# Debian packages the -sys crates need, and the wasm target. Idempotent and quiet.
setup:
	@missing=""; for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi
	@rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
	@command -v java >/dev/null || { $(SUDO) apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }
	@# javac: `kafka.sh tenant` (the ACL tests) compiles its small admin program once.
	@command -v javac >/dev/null || { $(SUDO) apt-get install -y -qq openjdk-17-jdk-headless >/dev/null; }
	@command -v mvn >/dev/null || { $(SUDO) apt-get install -y -qq maven >/dev/null; }

build: setup
	cargo build --workspace --bins

# Guests are wasm32-wasip2 components: one cargo build per guest workspace, then a
# copy under build/guests/ with stable names that specs and tests refer to.
guests: setup rust-guests js-guests py-guests

rust-guests: setup
	cd guest-examples && CARGO_TARGET_DIR=$(GUEST_TARGET_DIR) cargo build --release --target wasm32-wasip2
	cd tests/guests && CARGO_TARGET_DIR=$(GUEST_TARGET_DIR) cargo build --release --target wasm32-wasip2
	@mkdir -p $(GUESTS_DIR)
	@for f in $(GUEST_TARGET_DIR)/wasm32-wasip2/release/*.wasm; do cp "$$f" $(GUESTS_DIR)/; done
	@ls $(GUESTS_DIR)

# --- Python guests (sdk-python/) ---------------------------------------------------
# componentize-py, pinned in sdk-python/requirements.txt, lives in a venv outside the
# clone (pip's cache beside it), made by sdk-python/tools/build.py only when missing or
# when requirements.txt changed. Each guest is a real file target over its source, the
# SDK, the WIT and the pins: an unchanged guest is not rebuilt (a build is ~15 s).
PY_TOOLS_VENV ?= $(HOME)/.cache/weir/py-tools/venv
export WEIR_PY_TOOLS := $(PY_TOOLS_VENV)
PY_TOOLS_STAMP := $(PY_TOOLS_VENV)/weir-requirements.txt
PY_BUILD := python3 sdk-python/tools/build.py
PY_DEPS := $(wildcard sdk-python/weir_guest/*.py) sdk-python/tools/build.py \
	sdk-python/tools/build_cache.py sdk-python/requirements.txt wit/weir.wit
PY_GUESTS := $(GUESTS_DIR)/uppercase_py.wasm $(GUESTS_DIR)/word_count_py.wasm \
	$(GUESTS_DIR)/probe_py.wasm

.PHONY: py-tools py-guests
py-tools: $(PY_TOOLS_STAMP)

# build.py compares the stamp's content with requirements.txt; touch records the check.
$(PY_TOOLS_STAMP): sdk-python/requirements.txt
	@$(PY_BUILD) --ensure-tools >/dev/null && touch $@

py-guests: $(PY_GUESTS)

$(GUESTS_DIR)/uppercase_py.wasm: guest-examples/python/uppercase/uppercase.py $(PY_DEPS) | $(PY_TOOLS_STAMP)
	$(PY_BUILD) --world mapper -o $@ $<

$(GUESTS_DIR)/word_count_py.wasm: guest-examples/python/word-count/word_count.py $(PY_DEPS) | $(PY_TOOLS_STAMP)
	$(PY_BUILD) --world aggregator -o $@ $<

$(GUESTS_DIR)/probe_py.wasm: tests/guests-py/probe/probe.py $(PY_DEPS) | $(PY_TOOLS_STAMP)
	$(PY_BUILD) --world mapper -o $@ $<

# --- JavaScript guests (sdk-js/) ---------------------------------------------------
# componentize-js, jco and esbuild from npm, exactly as pinned by
# sdk-js/tools/package-lock.json, installed with `npm ci` outside the clone (like the
# cargo target dir), and again only when the lock's CONTENT changes: the stamp is a copy
# of the lock it installed. Needs Node >= 20 (the tools' own minimum: oxc-parser,
# commander); Debian bookworm's nodejs is 18, too old: take Node 20+ from NodeSource or
# nvm. Each guest is a real file target, rebuilt when its source, the SDK, the WIT or the
# tools change (`node sdk-js/tools/build.mjs --world W -o OUT guest.js`).
JS_TOOLS_DIR ?= $(HOME)/.cache/weir/js-tools
export WEIR_JS_TOOLS := $(JS_TOOLS_DIR)
JS_TOOLS_STAMP := $(JS_TOOLS_DIR)/.installed-package-lock.json
JS_NODE_MIN := 20.6
JS_BUILD := node sdk-js/tools/build.mjs
JS_DEPS := $(wildcard sdk-js/src/*.js) sdk-js/tools/build.mjs sdk-js/tools/build-cache.mjs wit/weir.wit $(JS_TOOLS_STAMP)
JS_GUESTS := $(GUESTS_DIR)/uppercase_js.wasm $(GUESTS_DIR)/word_count_js.wasm $(GUESTS_DIR)/probe_js.wasm

.PHONY: js-tools js-guests js-tools-check

js-tools: $(JS_TOOLS_STAMP)

# Always checked (cheap: a cmp), touched only by a real install, so guests are rebuilt
# only when the tools did change.
js-tools-check:
	@command -v npm >/dev/null || { echo "installing Node.js and npm (Debian)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq nodejs npm >/dev/null; }
	@node -e 'const [a, b] = process.versions.node.split(".").map(Number), [x, y] = "$(JS_NODE_MIN)".split(".").map(Number); process.exit(a > x || (a === x && b >= y) ? 0 : 1)' || { \
	  echo "Node $$(node --version) is too old: the JavaScript guest tools need Node >= $(JS_NODE_MIN) (Debian bookworm ships 18: use NodeSource or nvm)"; exit 1; }
	@{ cmp -s sdk-js/tools/package-lock.json $(JS_TOOLS_STAMP) && [ -d $(JS_TOOLS_DIR)/node_modules/@bytecodealliance/componentize-js ]; } || { \
	  echo "installing the pinned JavaScript guest tools into $(JS_TOOLS_DIR)"; \
	  mkdir -p $(JS_TOOLS_DIR) && rm -f $(JS_TOOLS_STAMP) && \
	  cp sdk-js/tools/package.json sdk-js/tools/package-lock.json $(JS_TOOLS_DIR)/ && \
	  (cd $(JS_TOOLS_DIR) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) && \
	  cp sdk-js/tools/package-lock.json $(JS_TOOLS_STAMP); }

$(JS_TOOLS_STAMP): js-tools-check ;

js-guests: $(JS_GUESTS)

$(GUESTS_DIR)/uppercase_js.wasm: guest-examples/js/uppercase/uppercase.js $(JS_DEPS)
	@mkdir -p $(@D)
	$(JS_BUILD) --world mapper -o $@ $<

$(GUESTS_DIR)/word_count_js.wasm: guest-examples/js/word-count/word-count.js $(JS_DEPS)
	@mkdir -p $(@D)
	$(JS_BUILD) --world aggregator -o $@ $<

$(GUESTS_DIR)/probe_js.wasm: tests/guests-js/probe/probe.js $(JS_DEPS)
	@mkdir -p $(@D)
	$(JS_BUILD) --world mapper -o $@ $<

# The API fuzzer the hosting tests run (tests/tests/hosting/fuzz.rs).
fuzz-tools:
	@$(WEIR_SCHEMATHESIS) --version 2>/dev/null | grep -q "$(SCHEMATHESIS_VERSION)" || { \
	  echo "installing schemathesis $(SCHEMATHESIS_VERSION) into $(VENV)"; \
	  python3 -m venv $(VENV) && $(VENV)/bin/pip install -q "schemathesis==$(SCHEMATHESIS_VERSION)"; }

# kubernetes-validate (PyPI, pinned in the script, venv outside the clone): the offline
# check of deploy/kubernetes/ (tests/tests/local/kubernetes_manifests.rs).
k8s-tools:
	@bash scripts/kubernetes/validate.sh install

test: setup guests fuzz-tools k8s-tools image-check
	cargo build --workspace --bins --tests
	# The example guests' own unit tests, on the host (Emitter::capture; no component).
	cd guest-examples && CARGO_TARGET_DIR=$(GUEST_TARGET_DIR) cargo test --quiet
	@kafkaenv=$$($(KAFKA) up) || { echo "make test: no broker of its own (stop a running one first: bash scripts/kafka/kafka.sh down)" >&2; exit 1; }; \
	  eval "$$kafkaenv"; export KAFKA_BOOTSTRAP KAFKA_SASL_BOOTSTRAP; trap '$(KAFKA) down; $(KAFKA_CLUSTER) down; $(S3) down' EXIT; \
	  clusterenv=$$($(KAFKA_CLUSTER) up) || exit 1; eval "$$clusterenv"; export KAFKA_CLUSTER_BOOTSTRAP; \
	  s3env=$$($(S3) up) || exit 1; eval "$$s3env"; export AWS_ENDPOINT_URL AWS_ALLOW_HTTP AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION WEIR_S3_BUCKET; \
	  cargo test --workspace --no-fail-fast -- --test-threads=2

# The fast tier: every crate's unit tests and in-process tests (the runtime's own, but
# for the object store's, which need an S3 server, and the tiered-code test, which needs
# the 19 MB Python guest; the SDK's; the example guests' on the host), the docs check,
# with the Rust guests only. No broker, no S3 server, no Python or JavaScript toolchain;
# about a minute warm on 2 cores. `make test` runs all of these and the rest.
FAST_SKIPS := storage::object::tests engine::tier_tests::a_large_module
test-fast: setup rust-guests
	@echo "make test-fast skips (make test runs them): $(FAST_SKIPS)"
	cargo test --workspace --lib -- $(addprefix --skip ,$(FAST_SKIPS))
	cargo test -p weir-tests --test local docs::
	cd guest-examples && CARGO_TARGET_DIR=$(GUEST_TARGET_DIR) cargo test --quiet

# The house rules CI gates after `make test` (.ci/run): formatting, and clippy's lints
# (the workspace's [lints], unwrap_used among them) as errors, tests and tools included.
check: setup
	@cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
	@cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --quiet -- -D warnings

# Every shipped example guest (Rust, Python, JavaScript; map and aggregate) over
# 10,000,000 records each, asserting exact output and flat guest memory; `make test`
# runs the same soak over 3,000,000 (tests/tests/guests/soak.rs).
soak: build guests
	cargo build --workspace --bins --tests
	WEIR_SOAK_RECORDS=10000000 cargo test -p weir-tests --test guests soak:: -- --test-threads=2 --nocapture

demo: build guests
	@rm -rf build/demo-output
	$(WEIR) run guest-examples/pipelines/demo.toml --from-scratch
	$(WEIR) checkpoints guest-examples/pipelines/demo.toml | tail -n 4
	@echo "--- committed output (first lines of build/demo-output):"
	@cat build/demo-output/*.txt | head -n 10

# Kafka in, WASM in the middle, Kafka out, exactly once; starts and stops its broker.
demo-kafka: build guests
	@kafkaenv=$$($(KAFKA) up) || { echo "make: no broker of its own (stop a running one first: bash scripts/kafka/kafka.sh down)" >&2; exit 1; }; \
	  eval "$$kafkaenv"; export KAFKA_BOOTSTRAP KAFKA_SASL_BOOTSTRAP; trap '$(KAFKA) down' EXIT; set -eu; \
	  $(KAFKA) topics --create --if-not-exists --topic weir-demo-lines --partitions 3 >/dev/null; \
	  $(KAFKA) topics --create --if-not-exists --topic weir-demo-word-counts --partitions 3 >/dev/null; \
	  for i in $$(seq 1 20000); do echo 'the quick brown fox jumps over the lazy weir'; done \
	    | $(KAFKA) produce --topic weir-demo-lines; \
	  rm -rf build/word-count-kafka-state build/word-count-kafka-dead-letter; \
	  $(WEIR) run guest-examples/pipelines/word-count-kafka.toml; \
	  echo '--- committed output (read_committed):'; \
	  $(KAFKA) consume --topic weir-demo-word-counts --from-beginning --isolation-level read_committed --timeout-ms 5000 2>/dev/null | head -n 10 || true; \
	  $(KAFKA) groups --describe --group weir.word-count-kafka

# Hosting: a broker with ACLs, `weir serve`, a tenant pushing modules and running a
# pipeline with the `weir` CLI (docs/src/operations/hosting.md); stops everything at exit.
demo-serve: build guests
	bash scripts/demo-serve.sh

# The bench's broker runs as kafka-server-start.sh runs one (1 GiB heap, G1, full JIT),
# not the tests' light JVM (C1 only), so the broker is not what the ceilings measure.
BENCH_BROKER_HEAP ?= -Xmx1g -Xms1g
BENCH_BROKER_JVM ?= -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true

bench: build guests
	cargo build --quiet -p weir-tests --bins
	$(CARGO_TARGET_DIR)/debug/weir-bench --out build/bench.json
	@kafkaenv=$$(WEIR_KAFKA_HEAP_OPTS="$(BENCH_BROKER_HEAP)" WEIR_KAFKA_JVM_OPTS="$(BENCH_BROKER_JVM)" $(KAFKA) up) || { echo "make bench: no broker of its own (stop a running one first: bash scripts/kafka/kafka.sh down)" >&2; exit 1; }; \
	  eval "$$kafkaenv"; export KAFKA_BOOTSTRAP KAFKA_SASL_BOOTSTRAP; trap '$(KAFKA) down' EXIT; \
	  $(CARGO_TARGET_DIR)/debug/weir-kafka-bench --out build/kafka-bench.json

# --- The container image (deploy/image/Dockerfile, scripts/image/) -----------------
# `make image`: the release `weir` and the example guests in an image tarball tagged
# weir:<version>, the image deploy/kubernetes/ runs, built without a Docker daemon by
# crane (pinned in scripts/image/lib.sh; from the Go module proxy into WEIR_TOOLS once).
# Load it with `kind load image-archive`, `docker load -i` or `crane push`.
WEIR_TOOLS ?= $(HOME)/.cache/weir/tools
IMAGE_VERSION := $(shell sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$$/\1/p' Cargo.toml)

image: setup rust-guests
	cargo build --release --locked -p weir
	WEIR_TOOLS=$(WEIR_TOOLS) bash scripts/image/build.sh $(CARGO_TARGET_DIR)/release/weir build/image/weir-$(IMAGE_VERSION).tar

# `make test`'s check of the image (scripts/image/check.sh: unpacked without a daemon,
# the demo run chroot'ed in it as uid 65532 on a read-only root; needs root). Its image
# is built the same way but from the dev-profile binary the tests build anyway
# (opt-level 3, Cargo.toml): a release build would add ~30 minutes to a cold CI run,
# and what the check proves (the image holds all `weir` needs, runs non-root on a
# read-only root filesystem) does not depend on the profile.
image-check: build rust-guests
	WEIR_TOOLS=$(WEIR_TOOLS) bash scripts/image/build.sh $(WEIR) build/image/weir-test.tar
	$(SUDO) env WEIR_TOOLS=$(WEIR_TOOLS) bash scripts/image/check.sh build/image/weir-test.tar

# The book (docs/src/, mdBook) into build/book/; `make test` checks its links and specs
# (tests/tests/local/docs.rs). mdBook is pinned and installed once from crates.io into a tools
# directory outside the clone; any warning of its build fails the target.
MDBOOK_VERSION := 0.5.4
DOCS_TOOLS ?= $(HOME)/.cache/weir/tools
MDBOOK := $(DOCS_TOOLS)/bin/mdbook

docs:
	@$(MDBOOK) --version 2>/dev/null | grep -qx "mdbook v$(MDBOOK_VERSION)" || { \
	  echo "installing mdbook $(MDBOOK_VERSION) into $(DOCS_TOOLS)"; \
	  env -u CARGO_TARGET_DIR cargo install mdbook --locked --quiet --version $(MDBOOK_VERSION) \
	    --no-default-features --features search --root $(DOCS_TOOLS); }
	@out=$$($(MDBOOK) build docs 2>&1) || { echo "$$out" >&2; exit 1; }; \
	  if grep -q WARN <<< "$$out"; then echo "$$out" >&2; echo "make docs: mdbook warned" >&2; exit 1; fi
	@echo "the book: build/book/index.html"

kafka-up:
	@$(KAFKA) up

kafka-down:
	@$(KAFKA) down

s3-up:
	@$(S3) up

s3-down:
	@$(S3) down

clean:
	rm -rf build .weir
