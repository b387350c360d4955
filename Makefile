# Elastic-training coordinator. `make test` is what CI runs.
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 20x
FUZZTIME  ?= 30s
BIN       := bin

.PHONY: all build test lint bench fuzz clean

all: lint build test

build:
	$(GO) build $(PKGS)

# The race detector is on: the coordinator, sidecar and keepalive are all
# concurrent, and the suite is fast enough to afford it.
test:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

lint:
	$(GO) vet $(PKGS)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

# Go benchmarks on embedded etcd; results go to bench/results/.
bench:
	@mkdir -p bench/results
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 60m ./coordinator/ | tee bench/results/coordinator.txt

# Each fuzz target for FUZZTIME (the seed corpora also run in `make test`).
fuzz:
	@for target in $$($(GO) test -list 'Fuzz.*' ./membership/ | grep ^Fuzz); do \
		echo "== $$target"; \
		$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) ./membership/ || exit 1; \
	done

clean:
	rm -rf $(BIN)
