# Commands for working on delay-queue. `make` alone lists them.

GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# The process-level tests build the server and kill it under load; give the
# whole run room, but not forever.
TEST_TIMEOUT ?= 15m
FUZZ_TIME    ?= 30s
# make bench CLUSTER=3 runs the benchmark on a local cluster of 3 primaries
# (CLUSTER=1: on a cluster of one node holding every slot).
CLUSTER      ?= 0
# make bench-compare BASE=<an older build's delay-queue> ROUNDS=10
ROUNDS       ?= 5

.DEFAULT_GOAL := help
.PHONY: help run build test lint bench bench-compare fuzz clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Built then run (not `go run`), so Ctrl-C and SIGTERM reach the server itself
# and it shuts down gracefully. delay-queue.conf binds 127.0.0.1:9277.
run: ## start the server on 127.0.0.1:9277 with an in-memory Redis (nothing to install)
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/delay-queue ./cmd/delay-queue
	./bin/delay-queue -c delay-queue.conf -embedded

build: ## build the binaries into bin/, with the version from git describe
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

# The suite runs last, through tools/testsummary: it prints what go test
# prints (the packages' results, the output of the tests that failed) and
# ends with the tests that were skipped and why; make test exits with go
# test's status.
#
# The short fuzz runs are counted in inputs, not seconds (about 10 s each
# here): a -fuzztime in seconds can end in a spurious "context deadline
# exceeded" failure on a busy machine, a race in Go's fuzz coordinator
# (golang/go#75804, fixed in Go 1.27).
test: ## fuzz the request parsing and decoding briefly, then run every test with the race detector and list the skipped ones
	$(GO) test -run '^$$' -fuzz '^FuzzRequest$$' -fuzztime 3000x ./routers/
	$(GO) test -run '^$$' -fuzz '^FuzzParseHeadAgreesWithNetHTTP$$' -fuzztime 60000x ./internal/http1/
	@dir="$$(mktemp -d)" && $(GO) build -o "$$dir/testsummary" ./tools/testsummary && \
	"$$dir/testsummary" $(GO) test -json -race -count=1 -timeout $(TEST_TIMEOUT) ./...; \
	status=$$?; rm -rf "$$dir"; exit $$status

lint: ## check formatting (gofmt) and run go vet
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# Starts a throwaway redis-server (CLUSTER=N: a cluster of N primaries) and
# the server on free loopback ports, runs redis-benchmark on that Redis for
# the reference rate, then tools/dq-bench. scripts/bench.sh lists the other
# settings (WRK=1, SERVER_BIN...), passed through the environment.
bench: ## load benchmark: figures, ratios to redis-benchmark and Redis CPU per job (ARGS=-quick: short run; CLUSTER=3: on a 3-primary cluster)
	GO=$(GO) CLUSTER=$(CLUSTER) scripts/bench.sh $(ARGS)

# Alternating rounds of scripts/bench.sh with another build and this one (see
# scripts/bench-compare.sh): on a shared machine, only figures taken side by
# side compare builds.
bench-compare: build ## this build against BASE=<another delay-queue binary>, in ROUNDS rounds side by side (ARGS for dq-bench)
	@test -n "$(BASE)" || { echo "make bench-compare: set BASE to the delay-queue binary to compare with"; exit 2; }
	GO=$(GO) CLUSTER=$(CLUSTER) scripts/bench-compare.sh -n $(ROUNDS) $(BASE) bin/delay-queue -- $(ARGS)

fuzz: ## fuzz the HTTP request parsing and decoding for FUZZ_TIME each (default 30s; a count such as 100000x avoids Go 1.26's deadline race)
	$(GO) test -run '^$$' -fuzz '^FuzzRequest$$' -fuzztime $(FUZZ_TIME) ./routers/
	$(GO) test -run '^$$' -fuzz '^FuzzParseHeadAgreesWithNetHTTP$$' -fuzztime $(FUZZ_TIME) ./internal/http1/

clean: ## remove bin/
	rm -rf bin
