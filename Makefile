# Elastic-training coordinator. `make test` is what CI runs.
GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 20x
FUZZTIME  ?= 30s
BIN       := bin

.PHONY: all build test tools lint bench bench-go bench-scale bench-footprint bench-restart bench-recovery bench-hang bench-goodput bench-kube bench-fence bench-edl-sim bench-edl chaos chaos-warm chaos-inplace fuzz clean kube-tools venv image push

all: lint build test

# bin/coordinator-sidecar is the sidecar's own binary: the sidecar, guard
# and commit commands only, stripped (no etcd server, no Kubernetes code).
# Both say VERSION (embedded), as the image's binary does: serve
# --kubernetes outside a pod injects the image `make image` tags for it.
build:
	$(GO) build $(PKGS)
	$(GO) build -o $(BIN)/coordinator ./cmd/coordinator
	$(GO) build -tags sidecaronly -trimpath -ldflags "-s -w" -o $(BIN)/coordinator-sidecar ./cmd/coordinator

# The race detector is on: the coordinator, sidecar and keepalive are all
# concurrent, and the suite is fast enough to afford it. The bridge's tests
# run against a real control plane built by kube-tools; the metrics, the
# dashboard and the alert rules are checked by Prometheus's promtool.
test: tools venv
	KUBE_BIN_DIR=$(abspath $(BIN)) $(GO) test -race -count=1 -timeout 25m $(PKGS)

# The frameworks' Python toolchain: a virtual environment of Debian's
# Python 3.11 with the pinned packages of hack/python/requirements.txt
# (torch 2.15, PaddlePaddle 3.3.1 for the CPU, MindSpore 2.10, torchft),
# from PyPI, built once and rebuilt only when that list changes. About
# 4 GB to download (torch brings its CUDA libraries) and 9 GB on disk.
# The tests find it at bin/venv; Debian's torch 1.13 stays the second
# PyTorch.
VENV := $(BIN)/venv
venv: $(VENV)/.installed

# pip downloads into a folder beside the venv (a small tmpfs /tmp cannot
# hold torch's wheels), keeps no cache, and installs the list eight
# packages at a time, so that the disk holds at most eight wheels beside
# what is installed: about 11 GB at the peak, checked first.
VENV_NEEDS_GB := 11
$(VENV)/.installed: hack/python/requirements.txt
	@mkdir -p $(BIN); free=$$(df -P -BG $(BIN) | awk 'NR==2 {sub("G","",$$4); print $$4}'); \
	if [ "$$free" -lt $(VENV_NEEDS_GB) ]; then \
		echo "make venv: $(VENV) needs about $(VENV_NEEDS_GB) GB free on its disk, $$free GB are" >&2; exit 1; fi
	rm -rf $(VENV) $(VENV).tmp
	/usr/bin/python3 -m venv $(VENV)
	mkdir -p $(VENV).tmp
	sed -e 's/#.*//' -e '/^[[:space:]]*$$/d' hack/python/requirements.txt | \
		TMPDIR=$(abspath $(VENV).tmp) xargs -n 8 $(VENV)/bin/pip install --disable-pip-version-check --no-input -q --no-cache-dir --no-deps
	rm -rf $(VENV).tmp
	$(VENV)/bin/pip check
	touch $@

# A Kubernetes control plane for tests, built from pinned sources (the
# versions are in hack/tools/go.mod and KWOK_VERSION), cached in bin/, and
# kubectl, which the tests use as a user does.
KWOK_VERSION := v0.7.0
KUBE_VERSION := $(shell sed -n 's|^\s*k8s.io/kubernetes \(v[^ ]*\).*|\1|p' hack/tools/go.mod)
KUBE_COMPONENTS := kube-apiserver kube-controller-manager kube-scheduler kubectl
kube-tools: $(addprefix $(BIN)/,$(KUBE_COMPONENTS)) $(BIN)/kwok

$(addprefix $(BIN)/,$(KUBE_COMPONENTS)): hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && $(GO) build -ldflags "-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) -X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION)" \
		-o $(abspath $@) k8s.io/kubernetes/cmd/$(notdir $@)

$(BIN)/kwok:
	GOBIN=$(abspath $(BIN)) $(GO) install sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION)

# Kueue's controller manager and its CRDs, at the version of its API that
# go.mod pins, built with Kueue's own dependencies (its module has no
# replace directives); the tests run it beside the control plane.
KUEUE_VERSION := $(shell sed -n 's|^\s*sigs.k8s.io/kueue \(v[^ ]*\).*|\1|p' go.mod)
kube-tools: $(BIN)/kueue $(BIN)/kueue-crds $(BIN)/kueue-webhooks.yaml

$(BIN)/kueue: go.mod
	GOBIN=$(abspath $(BIN)) $(GO) install -ldflags "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$(KUEUE_VERSION)" sigs.k8s.io/kueue/cmd/kueue@$(KUEUE_VERSION)

$(BIN)/kueue-crds: go.mod
	rm -rf $@ $@.tmp && mkdir -p $@.tmp
	cp "$$($(GO) mod download -json sigs.k8s.io/kueue@$(KUEUE_VERSION) | sed -n 's|^\s*"Dir": "\(.*\)",$$|\1|p')"/config/components/crd/bases/*.yaml $@.tmp/
	chmod -R u+w $@.tmp && mv $@.tmp $@

$(BIN)/kueue-webhooks.yaml: go.mod
	cp "$$($(GO) mod download -json sigs.k8s.io/kueue@$(KUEUE_VERSION) | sed -n 's|^\s*"Dir": "\(.*\)",$$|\1|p')"/config/components/webhook/manifests.yaml $@.tmp
	chmod u+w $@.tmp && mv $@.tmp $@

# Everything the tests run besides the project: the control plane, and
# Prometheus's promtool (built from the prometheus module at a pinned
# version) for the metrics, the dashboard's queries and the alert rules.
PROMTOOL_VERSION := v0.316.0
tools: kube-tools $(BIN)/promtool

$(BIN)/promtool:
	GOBIN=$(abspath $(BIN)) $(GO) install github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)

# go vet, gofmt and staticcheck (built from the version pinned in
# hack/tools/lint, with its default checks).
lint: $(BIN)/staticcheck
	$(GO) vet $(PKGS)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(BIN)/staticcheck $(PKGS)

$(BIN)/staticcheck: hack/tools/lint/go.mod hack/tools/lint/go.sum
	cd hack/tools/lint && $(GO) build -o $(abspath $@) honnef.co/go/tools/cmd/staticcheck

# Benchmarks; results go to bench/results/.
bench: bench-go bench-restart bench-kube bench-fence

# The coordinator on embedded etcd with simulated nodes; what the guard adds
# to one process's stop and start.
bench-go:
	@mkdir -p bench/results
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 60m ./coordinator/ | tee bench/results/coordinator.txt
	$(GO) test -run '^$$' -bench . -benchtime 100x ./launcher/ | tee bench/results/launcher.txt

# Jobs of thousands of nodes, to every node running: real etcd and serve
# processes, the sidecar agents in a few processes (bench/scale). At 10,000
# nodes the TTL recommended at that size (15 s), and the default (5 s).
SCALE_SIZES  ?= 1000,2000,5000,10000@15s,10000x8@15s,10000@5s
SCALE_LOSSES ?= 3
bench-scale: build
	@mkdir -p bench/results
	$(GO) run ./bench/scale -coordinator $(BIN)/coordinator -sizes $(SCALE_SIZES) -losses $(SCALE_LOSSES) \
		-logs $${TMPDIR:-/tmp}/bench-scale-logs -out bench/results/scale.md

# What every training pod pays for the sidecar: binary size and RSS of the
# full binary and of bin/coordinator-sidecar.
bench-footprint: build
	@mkdir -p bench/results
	$(GO) run ./bench/footprint -coordinator $(BIN)/coordinator -sidecar $(BIN)/coordinator-sidecar -out bench/results/footprint.md

# Restart latency of `coordinator run` with real processes (python3), and of
# torchrun for comparison when PyTorch is installed. RESTART_BEFORE=BINARY
# measures another build (the code before a change) in the same run.
RESTART_NODES  ?= 4,16
RESTART_RUNS   ?= 7
RESTART_BEFORE ?=
RESTART_BEFORE_LABEL ?= before
bench-restart: build
	@mkdir -p bench/results
	$(GO) run ./bench/restart -coordinator $(BIN)/coordinator -nodes $(RESTART_NODES) -runs $(RESTART_RUNS) \
		$(if $(RESTART_BEFORE),-before $(RESTART_BEFORE) -before-label "$(RESTART_BEFORE_LABEL)") \
		$$(/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null && echo -torchrun) -out bench/results/restart.txt

# What a fault costs a real PyTorch DDP job (bench/recovery/trainer.py): a
# rank killed, a node killed, a node's guard killed (coordinator run only),
# scale up and down by one, on coordinator run
# with 2 and 4 ranks, cold and warm (and warm with one spare), and torchrun
# in the same run; about 15 minutes. Modes this build lacks are reported as
# not available. RECOVERY_ARGS adds flags, e.g. -scenarios kill-rank -modes
# cold,warm, or -scenarios kill-node -modes warm,spare. Then the same on
# PyPI's torch 2.15 (the venv's; cold, warm, in place, alone; its torchrun
# and torchft 0.2 beside, torchft_trainer.py the same model in torchft's
# DDP) and a real PaddlePaddle job killed under run --framework paddle and under
# PaddlePaddle's own elastic launcher (-suite paddle, 2 ranks).
RECOVERY_NP   ?= 2,4
RECOVERY_RUNS ?= 5
RECOVERY_ARGS ?=
bench-recovery: build venv
	@mkdir -p bench/results
	$(GO) run ./bench/recovery -coordinator $(BIN)/coordinator -np $(RECOVERY_NP) -runs $(RECOVERY_RUNS) $(RECOVERY_ARGS) \
		-out bench/results/recovery.txt
	$(GO) run ./bench/recovery -coordinator $(BIN)/coordinator -python $(VENV)/bin/python -np 2 -runs $(RECOVERY_RUNS) \
		-modes cold,warm,inplace,alone -scenarios kill-rank,kill-node -torchft -state-scenarios '' -alone-scenarios '' \
		-out bench/results/recovery-torch2.txt
	$(GO) run ./bench/recovery -suite paddle -coordinator $(BIN)/coordinator -paddle-python $(VENV)/bin/python -np 2 -runs $(RECOVERY_RUNS) \
		-out bench/results/recovery-paddle.txt

# Hang detection (issue 32) on the same 2-rank DDP job, a plain script run
# with --preload torch, and torchrun in the same run: rank 1's trainer
# stopped (SIGSTOP) or deadlocked, each fault in a job of its own, until
# every rank trains again or the limit (30 s; torchrun 60 s); then two
# 5-minute runs whose ranks pause 3 s and 30 s every 150 steps, counting
# hang restarts. About 20 minutes. HANG_ARGS adds flags, e.g. for a trial:
# HANG_RUNS=1 HANG_ARGS="-pause-run 30s -hang-limit 10s -torchrun-limit 10s".
# Then a stopped trainer on PyPI's torch 2.15 (the venv's), np 2.
HANG_NP   ?= 2
HANG_RUNS ?= 5
HANG_ARGS ?=
bench-hang: build venv
	@mkdir -p bench/results
	$(GO) run ./bench/recovery -suite hang -coordinator $(BIN)/coordinator -np $(HANG_NP) -runs $(HANG_RUNS) $(HANG_ARGS) \
		-out bench/results/hang.txt
	$(GO) run ./bench/recovery -suite hang -coordinator $(BIN)/coordinator -python $(VENV)/bin/python -np 2 -runs $(HANG_RUNS) \
		-hang-faults stopped -pauses '' -out bench/results/hang-torch2.txt

# Goodput (issue 33) on the same DDP job, --preload torch and elastic.save
# every step, with and without one spare (run --spares 1), and torchrun (a
# checkpoint on disk every 10 steps) in the same run: a minute fault-free
# for the step rate, then 10 minutes with a fault every 30 s in turn (kill
# a rank, hang one, kill a node, freeze one for 10 s, scale up and down by
# one); goodput from the step logs beside the job's own account (status's
# goodput). About 70 minutes at 2 and 4 ranks (11 a job). What this build lacks is
# reported as not available or n/a. GOODPUT_ARGS adds flags, e.g. for a
# trial: GOODPUT_NP=2 GOODPUT_ARGS="-duration 2m -calibrate 20s". Then
# 5 minutes on PyPI's torch 2.15 (the venv's), in place, np 2.
GOODPUT_NP   ?= 2,4
GOODPUT_ARGS ?=
bench-goodput: build venv
	@mkdir -p bench/results
	$(GO) run ./bench/recovery -suite goodput -coordinator $(BIN)/coordinator -np $(GOODPUT_NP) -duration 10m -every 30s $(GOODPUT_ARGS) \
		-out bench/results/goodput.txt
	$(GO) run ./bench/recovery -suite goodput -coordinator $(BIN)/coordinator -python $(VENV)/bin/python -np 2 -modes inplace \
		-duration 5m -every 30s -out bench/results/goodput-torch2.txt

# Each fuzz target for FUZZTIME (the seed corpora also run in `make test`).
FUZZ_PKGS := ./membership/ ./guard/ ./operatorbridge/jobcontroller/ ./trainerenv/ ./coordinator/ ./handover/ ./memckpt/
fuzz:
	@for pkg in $(FUZZ_PKGS); do \
		for target in $$($(GO) test -list 'Fuzz.*' $$pkg | grep ^Fuzz); do \
			echo "== $$pkg $$target"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

clean:
	rm -rf $(BIN)

# How a node that cannot act is fenced, with real processes: from SIGSTOP of
# its sidecar, and from cutting its network to etcd, to its trainer being
# dead, against the lease's expiry and the next generation's start.
FENCE_RUNS ?= 20
bench-fence: build
	@mkdir -p bench/results
	$(GO) run ./bench/fence -coordinator $(BIN)/coordinator -runs $(FENCE_RUNS) -out bench/results/fence.txt

# Time from `coordinator scale` to pods Running and the ConfigMap updated,
# on the real control plane with kwok.
KUBE_REPLICAS ?= 4,64
# The autoscale policy alone on synthetic traces, against EDL's rule and
# no autoscaling (no control plane; 20 s).
bench-edl-sim:
	@mkdir -p bench/results
	$(GO) run ./bench/edlsim -out bench/results/edl-sim.md

# The seed's EDL experiment on the control plane with kwok: case 1 and case
# 2, autoscaling off, EDL's rule and --autoscale, EDL_PASSES each, the
# schedule EDL_COMPRESS times faster; tables and plots in bench/results.
EDL_PASSES ?= 3
EDL_COMPRESS ?= 2
bench-edl: build kube-tools
	@mkdir -p bench/results
	KUBE_BIN_DIR=$(abspath $(BIN)) $(GO) run ./bench/edl -coordinator $(BIN)/coordinator -passes $(EDL_PASSES) -compress $(EDL_COMPRESS) -out bench/results

bench-kube: build kube-tools
	@mkdir -p bench/results
	KUBE_BIN_DIR=$(abspath $(BIN)) $(GO) run ./bench/kube -coordinator $(BIN)/coordinator -replicas $(KUBE_REPLICAS) -runs 5 -out bench/results/kube.txt


# The seeded fault suite: a job on three etcd members, two coordinator
# replicas and five sidecars (CHAOS_SPARES of them the spec's spares) through
# CHAOS_SECONDS of faults per seed, every
# invariant checked after each run (`make test` runs seed 1 for a minute).
# A failing seed prints the command that runs it again.
CHAOS_SEEDS   ?= 1-20
CHAOS_SECONDS ?= 120
CHAOS_SPARES  ?= 1
chaos: build
	@mkdir -p bench/results
	$(GO) run ./integration/chaos -coordinator $(BIN)/coordinator -spares $(CHAOS_SPARES) -seeds $(CHAOS_SEEDS) -seconds $(CHAOS_SECONDS) -out bench/results/chaos.txt

# The same on the warm path: python3 worker.py under --preload, a checkpoint
# in the sidecars' memory every step.
chaos-warm: build
	@mkdir -p bench/results
	$(GO) run ./integration/chaos -coordinator $(BIN)/coordinator -warm -seeds $(CHAOS_SEEDS) -seconds $(CHAOS_SECONDS) -out bench/results/chaos-warm.txt

# The same with trainers that train in place (elastic.run, run --in-place):
# survivors keep their processes across generations, each node keeps a
# started spare, and no survivor may be seen in two generations.
chaos-inplace: build
	@mkdir -p bench/results
	$(GO) run ./integration/chaos -coordinator $(BIN)/coordinator -in-place -spares $(CHAOS_SPARES) -seeds $(CHAOS_SEEDS) -seconds $(CHAOS_SECONDS) -out bench/results/chaos-inplace.txt

# The container image, built without a Docker engine or a base image: the
# static binary on an empty root, user 65532 (internal/ociimage). The
# tarball loads with `docker load -i`, `ctr images import` or
# `kind load image-archive`; `make push REGISTRY=registry.example.com/team`.
VERSION   ?= $(shell cat VERSION)
IMAGE     ?= elastic-coordinator:$(VERSION)
IMAGE_TAR ?= $(BIN)/elastic-coordinator.tar
IMAGE_DIR ?= $(BIN)/image
REGISTRY  ?=
image:
	@mkdir -p $(IMAGE_DIR)
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o $(IMAGE_DIR)/coordinator ./cmd/coordinator
	$(GO) run ./hack/image -binary $(IMAGE_DIR)/coordinator -tag $(IMAGE) -version $(VERSION) -out $(IMAGE_TAR)

push: image
	@test -n "$(REGISTRY)" || { echo "push: set REGISTRY, e.g. make push REGISTRY=registry.example.com/team"; exit 2; }
	$(GO) run ./hack/image -binary $(IMAGE_DIR)/coordinator -tag $(IMAGE) -version $(VERSION) -push $(REGISTRY)/$(IMAGE)
