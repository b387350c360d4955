# Elastic-training coordinator. `make test` is what CI runs.
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 20x
FUZZTIME  ?= 30s
BIN       := bin

.PHONY: all build test lint bench bench-go bench-restart fuzz clean

all: lint build test

build:
	$(GO) build $(PKGS)
	$(GO) build -o $(BIN)/coordinator ./cmd/coordinator

# The race detector is on: the coordinator, sidecar and keepalive are all
# concurrent, and the suite is fast enough to afford it.
test:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

lint:
	$(GO) vet $(PKGS)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

# Benchmarks; results go to bench/results/.
bench: bench-go bench-restart

# The coordinator on embedded etcd with simulated nodes.
bench-go:
	@mkdir -p bench/results
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 60m ./coordinator/ | tee bench/results/coordinator.txt

# Restart latency of `coordinator run` with real processes (python3), and of
# torchrun for comparison when PyTorch is installed.
RESTART_NODES ?= 4,16
RESTART_RUNS  ?= 7
bench-restart: build
	@mkdir -p bench/results
	$(GO) run ./bench/restart -coordinator $(BIN)/coordinator -nodes $(RESTART_NODES) -runs $(RESTART_RUNS) \
		$$(/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null && echo -torchrun) -out bench/results/restart.txt

# Each fuzz target for FUZZTIME (the seed corpora also run in `make test`).
fuzz:
	@for target in $$($(GO) test -list 'Fuzz.*' ./membership/ | grep ^Fuzz); do \
		echo "== $$target"; \
		$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) ./membership/ || exit 1; \
	done

clean:
	rm -rf $(BIN)
