# Sluice build and test entry points. `make test` is what CI runs.

GO        ?= go
FUZZTIME  ?= 3s
PKGS      ?= ./...
# TESTFLAGS go to go test; CI sets -count=1 so no result comes from the cache.
TESTFLAGS ?=
# BIN is where `make build` writes the sluice binary (bin/ is git-ignored).
BIN       ?= bin
# IMAGE is the tag `make image` gives the container image.
IMAGE     ?= sluice:latest

.PHONY: all build image test unit allocs fuzz vet fmt bench bench-peers bench-redis-clients proto

all: build

# Compiles every package, then writes the sluice command to $(BIN)/sluice,
# built as the container image builds it.
build:
	$(GO) build ./...
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o $(BIN)/sluice ./cmd/sluice

# Builds the container image from the Dockerfile with docker, or podman
# when docker is not installed (docs/deploy.md).
image:
	@if command -v docker >/dev/null 2>&1; then tool=docker; \
	 elif command -v podman >/dev/null 2>&1; then tool=podman; \
	 else echo "make image: neither docker nor podman is installed; install one, or build the binary alone with make build" >&2; exit 1; fi; \
	 echo "$$tool build -t $(IMAGE) ."; $$tool build -t $(IMAGE) .

# The tests CI runs: the race-detector suite, the allocation tests without
# it, then every fuzz target briefly.
test: vet unit allocs fuzz

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	 if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@# and for a 32-bit platform (386, arm), where int is 32 bits and
	@# int64 aligned to 4 bytes
	GOARCH=386 $(GO) vet $(PKGS)
	@# limiter.Spend and Check must stay inlinable: otherwise every caller
	@# copies its Transaction in moves the store buffer cannot forward, and
	@# a decision over many buckets waits for the one before it
	@# (BENCHMARKS.md, bbb1afc).
	@# limiter.SpendFor's shortest path must make no call before it asks
	@# the store for the bucket's slot: what it reads through the calls
	@# below must stay inlined into it (BENCHMARKS.md, "SpendFor's shortest path").
	@out=$$($(GO) build -gcflags=-m ./limiter 2>&1); \
	 for f in Spend Check; do \
	   echo "$$out" | grep -qE "can inline \(\*Limiter\)\.$$f$$" || \
	     { echo "limiter.$$f is no longer inlinable (go build -gcflags=-m=2 ./limiter says why)"; exit 1; }; \
	 done; \
	 for f in 'limits\.\(\*Set\)\.Short' 'limits\.\(\*Set\)\.MayOverrideShort' 'keybuf\.Load4' 'keybuf\.JoinNear' 'keybuf\.Digits'; do \
	   echo "$$out" | grep -qE "inlining call to $$f$$" || \
	     { echo "limiter.SpendFor no longer inlines $$f (go build -gcflags=-m=2 ./limits ./internal/keybuf says why)"; exit 1; }; \
	 done

unit:
	$(GO) test -race -timeout 20m $(TESTFLAGS) $(PKGS)
	@# the memory store again without the race detector: only then are its
	@# larger tables mapped with huge pages (arena_linux.go), as in a release
	$(GO) test -timeout 10m $(TESTFLAGS) ./store/memory
	@# the tool that reads make bench-peers' rounds, in bench/peers' module
	cd bench/peers && $(GO) vet ./ratios && $(GO) test -race $(TESTFLAGS) ./ratios

# The allocation tests again without the race detector, whose sync.Pool
# drops items on purpose (those that count on a pool skip under -race).
allocs:
	$(GO) test -run 'Alloc' $(TESTFLAGS) $(PKGS)

# Runs each native fuzz target of the packages PKGS names for FUZZTIME.
# Targets are found by name in the test files, so a new target is fuzzed
# without editing this file. A target that fails with only "context
# deadline exceeded" and no failing input written is run once more: Go
# before 1.27 can fail a target that way as -fuzztime ends, having found
# nothing (golang/go#75804); a real finding always writes its input.
fuzz:
	@set -e; out=$$(mktemp); trap 'rm -f $$out' EXIT; \
	for dir in $$($(GO) list -f '{{.Dir}}' $(PKGS)); do \
	  for t in $$(cat $$dir/*_test.go 2>/dev/null | grep '^func Fuzz' | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    for try in 1 2; do \
	      echo "fuzz $$dir $$t"; \
	      if $(GO) test -run='^$$' -fuzz="^$$t$$" -fuzztime=$(FUZZTIME) $$dir >$$out 2>&1; then cat $$out; break; fi; \
	      cat $$out; \
	      if [ $$try = 1 ] && grep -q 'context deadline exceeded' $$out && ! grep -q 'Failing input written' $$out; then \
	        echo "fuzz $$dir $$t: the fuzzing engine's deadline race (golang/go#75804), nothing found: once more"; continue; \
	      fi; \
	      exit 1; \
	    done; \
	  done; \
	done

fmt:
	gofmt -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

bench:
	$(GO) test -run='^$$' -bench=. -benchmem $(PKGS)

# Sluice's Go library beside the in-process limiters Go users pick, on
# 1,048,576 keys, in the module bench/peers (the main module never depends
# on them): the keys the buckets were made with, fresh copies, fresh
# copies of buckets made in another order, and 36- and 57-byte keys; 1
# and 2 cores, and the heap each keeps per live bucket.
# BenchmarkSpendWithWork and BenchmarkKeyLengths, diagnostics, are left
# out (BENCHMARKS.md has their commands). Each round's ratios to the best
# peer, as BENCHMARKS.md gives them: save each round's output, then
#   cd bench/peers && go run ./ratios /tmp/peers-r1.log /tmp/peers-r2.log ...
bench-peers:
	cd bench/peers && $(GO) test -run=TestMemoryPerBucket -bench='^Benchmark(Peers|CachedBuckets|Floor)$$' -benchmem -cpu 1,2 -v . | grep -E '^(Benchmark|memory per|huge pages)'

# The Redis client under Sluice's store beside go-redis and radix v4
# (envoyproxy/ratelimit's), counting Envoy windows on a redis-server of
# its own, in the module bench/redisclients; checks first that every
# client counts the same window.
bench-redis-clients:
	cd bench/redisclients && $(GO) test -run=TestClientsCountTheSameWindow -bench=. -count 3 .

# Regenerates the Go code of api/sluice/v1/*.proto (the key-value API,
# its runtime overrides and the descriptor counters admin API)
# with pinned plugins installed into ./bin (git-ignored). Needs protoc
# (apt-get install protobuf-compiler); the committed code was made with
# libprotoc 3.21.12.
proto: PROTOC_GEN_GO_VERSION := v1.36.12
proto: PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
proto:
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	protoc --plugin=protoc-gen-go=$(CURDIR)/bin/protoc-gen-go \
	  --plugin=protoc-gen-go-grpc=$(CURDIR)/bin/protoc-gen-go-grpc \
	  --go_out=. --go_opt=paths=source_relative \
	  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
	  api/sluice/v1/limits.proto api/sluice/v1/descriptors.proto api/sluice/v1/overrides.proto
