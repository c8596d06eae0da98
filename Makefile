# berth: `make up` runs the daemon (and serves its web app), `make test` runs every test,
# the web app's browser tests among them. Both install what is missing first (Debian
# packages, as root: Node and npm build the web app) and build berth-init statically.

CARGO ?= cargo
HOST_TRIPLE := $(shell rustc -vV | sed -n 's/^host: //p')
INIT_DIR := target/$(HOST_TRIPLE)/init
INIT_BIN := $(INIT_DIR)/berth-init
ECHO_BIN := $(INIT_DIR)/echo-harness
ARGS ?=
# Where each skipped test records itself (crates/testkit), read back for the tally.
SKIP_LOG := $(CURDIR)/target/test-skips/skips.log

export BERTH_INIT_BIN := $(CURDIR)/$(INIT_BIN)
export ECHO_HARNESS_BIN := $(CURDIR)/$(ECHO_BIN)

.PHONY: up test bench deps test-deps init build install clean

## up: install what is missing, build (the web app too, embedded), and run `berth up $(ARGS)`
up: deps init
	$(CARGO) build --release -p berth
	cp $(INIT_BIN) $(ECHO_BIN) target/release/
	@echo "berth: for client commands in another shell, \`make install\` (into /usr/local/bin) or: export PATH=$(CURDIR)/target/release:\$$PATH"
	target/release/berth up $(ARGS)

## test: install what is missing, build, and run all tests (cargo nextest when installed:
## one process per test; else cargo test; the web app's in chromium, screenshots in
## target/web-screenshots), then the tally of the tests that skipped (each
## appends to $(SKIP_LOG); `BERTH_REQUIRE=sandbox,qemu make test` fails a required part's
## skip: crates/testkit). Exits non-zero when a test failed.
test: export BERTH_SKIP_LOG := $(SKIP_LOG)
test: test-deps init
	@mkdir -p $(dir $(SKIP_LOG)) && : > $(SKIP_LOG)
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		echo "$(CARGO) nextest run --workspace --no-fail-fast"; \
		$(CARGO) nextest run --workspace --no-fail-fast; \
	else \
		echo "$(CARGO) test --workspace --no-fail-fast"; \
		$(CARGO) test --workspace --no-fail-fast; \
	fi; \
	status=$$?; \
	./scripts/skip-tally.sh $(SKIP_LOG); \
	exit $$status

## bench: cold start, exec round-trip, wake latency, message throughput, egress (gateway
## vs direct vs nginx), the ports proxy (vs the same server on the host) and terminal
## keystroke echo (vs a PTY on the host), and the E2B layer (vs berth's own API), each
## against a baseline measured in the same run
bench: deps init
	@./scripts/install-deps.sh --tests --bench
	$(CARGO) bench -p berth-benches

## deps: the Debian packages berth needs (runc; nodejs and npm for the web app), installed
## when missing and running as root
deps:
	@./scripts/install-deps.sh

## test-deps: deps, and what the tests need (python3, qemu, chromium; Claude Code from npm)
test-deps:
	@./scripts/install-deps.sh --tests

## init: berth-init and the example echo harness, linked statically so they run in any
## root filesystem
init:
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build -p berth-init -p echo-harness --profile init --target $(HOST_TRIPLE)

build: init
	$(CARGO) build --release -p berth

## install: berth, berth-init and echo-harness into /usr/local/bin
install: build
	install -m 0755 target/release/berth /usr/local/bin/berth
	install -m 0755 $(INIT_BIN) /usr/local/bin/berth-init
	install -m 0755 $(ECHO_BIN) /usr/local/bin/echo-harness

clean:
	$(CARGO) clean
