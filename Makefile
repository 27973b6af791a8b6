# sandbash — `make help` lists the targets.

GO          ?= go
# The podman backend builds only with these tags (once its bindings' need;
# see backend/podman's package documentation); everything else builds
# without them (and lint checks that it does).
TAGS        ?= containers_image_openpgp,exclude_graphdriver_btrfs
GOTEST      ?= $(GO) test
TESTFLAGS   ?= -race
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 30s
# Flags for the test binaries make test-user runs as the user.
USERTESTFLAGS ?=
# e.g. BENCHFLAGS="-backends docker -n 10"
BENCHFLAGS  ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*?## "} /^[a-zA-Z0-9_-]+:.*?## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
# Without cgo: a static binary starts without the dynamic linker, the C
# library's start-up and its threads (0.2-0.8 ms of every one-shot run),
# and runs where there is no C library (a devcontainer's image). Nothing in
# sandbash needs cgo; name lookups (the egress proxy's) use Go's resolver.
build: ## build bin/sandbash, and bin/sandbash-kubernetes, the build with the Kubernetes backend, which sandbash hands such commands to
	CGO_ENABLED=0 $(GO) build -tags $(TAGS) -o bin/sandbash ./cmd/sandbash
	CGO_ENABLED=0 $(GO) build -tags $(TAGS),sandbash_kubernetes -o bin/sandbash-kubernetes ./cmd/sandbash

.PHONY: deps
deps: ## install and start what the tests need: bubblewrap, Docker, Podman, the test images, the MCP inspector
	@scripts/deps.sh bwrap images docker docker-images podman podman-images inspector

.PHONY: lint
lint: ## gofmt, go vet and staticcheck; the module still builds without tags and at go 1.25
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt: these files need 'gofmt -w':"; echo "$$out"; exit 1; fi
	@bad=$$(git ls-files -z | xargs -0 -r sh -c 'for f; do [ -f "$$f" ] || continue; if [ $$(stat -c %s "$$f") -gt 1048576 ] || [ "$$(head -c 4 "$$f" | od -An -c | tr -d " ")" = "177ELF" ]; then echo "$$f"; fi; done' sh); \
	  if [ -n "$$bad" ]; then echo "lint: tracked files that look like build output (over 1 MiB, or ELF binaries): git rm --cached them and add them to .gitignore:"; echo "$$bad"; exit 1; fi
	@grep -qx 'go 1.25.0' go.mod || { echo "go.mod: the go directive must stay 1.25.0 (a dependency raised it?)"; exit 1; }
	$(GO) build ./...
	$(GO) vet ./...
	$(GO) vet -tags $(TAGS) ./...
	$(GO) vet -tags $(TAGS),sandbash_kubernetes ./cmd/sandbash
	$(GO) run $(STATICCHECK) -tags $(TAGS),sandbash_kubernetes ./...
	$(GO) run $(STATICCHECK) -tags $(TAGS) ./cmd/sandbash

.PHONY: test
test: deps lint ## everything: lint, then all tests (unit, conformance on bwrap, Docker, Podman and the Kubernetes test cluster, CLI) with the race detector (the CLI's also with the Kubernetes build's tag), then the engine-death tests alone, then the same suites as a user (test-user)
	@trap 'scripts/deps.sh k8s-down' EXIT; scripts/deps.sh k8s k8s-up && \
	  $(GOTEST) -tags $(TAGS) $(TESTFLAGS) -count=1 ./... && \
	  $(GOTEST) -tags $(TAGS),sandbash_kubernetes $(TESTFLAGS) -count=1 ./cmd/sandbash
	$(MAKE) --no-print-directory enginedeath
	$(MAKE) --no-print-directory test-user

.PHONY: k8s-up k8s-down
k8s-up: ## bring up the single-node Kubernetes test cluster (scripts/k8s.sh; builds the kube binaries once, into /var/cache/sandbash-k8s); make test brings it up and down itself
	@scripts/deps.sh k8s k8s-up

k8s-down: ## tear the test cluster down, leaving nothing behind but the build cache
	@scripts/deps.sh k8s-down

.PHONY: test-user
test-user: deps ## the conformance suites and the CLI/MCP tests again as an unprivileged user (made if missing): bwrap in user namespaces, Docker through the docker group, rootless Podman
	@scripts/deps.sh user user-podman user-podman-images user-inspector
	GO="$(GO)" TAGS="$(TAGS)" scripts/test-user.sh $(USERTESTFLAGS)

.PHONY: enginedeath
enginedeath: deps ## kill sandbash and stop dockerd and the Podman service mid-call (nothing else may use the engines meanwhile)
	$(GOTEST) -tags $(TAGS),enginedeath $(TESTFLAGS) -count=1 -p 1 -run 'TestDeadSandbash|TestStoppedSandbash|TestWarmContainerOfDeadSandbash|TestEngineGoesAwayMidCall' ./integration

.PHONY: integration
integration: deps ## only the end-to-end CLI tests
	$(GOTEST) -tags $(TAGS) $(TESTFLAGS) -count=1 ./integration/...

.PHONY: images
images: ## (re)build the local test images (bash-static + busybox-static; a Go variant) into docker and podman
	@scripts/deps.sh images docker podman
	scripts/images.sh docker podman

.PHONY: bench
bench: build ## issue 15's table: 1 GiB output, one-shot, in-process, back-to-back, warm and 32x10 concurrent calls, per backend, as ratios to the plain sandbox measured alongside (exits 1 on a missed target); then session diff --stat over 100,000 files and the egress proxy vs direct
	$(GO) run -tags $(TAGS) ./cmd/sandbash-bench -sandbash bin/sandbash $(BENCHFLAGS)
	$(GOTEST) -run '^$$' -bench DiffStat100k -benchtime 20x ./internal/review
	$(GOTEST) -run '^$$' -bench 'BenchmarkProxy' -count 3 ./internal/egress

.PHONY: bench-k8s
bench-k8s: build ## the Kubernetes rows on the test cluster (brought up and down around them): pod start (one-shot) and warm call vs kubectl run --rm, 32x10 concurrent calls
	@trap 'scripts/deps.sh k8s-down' EXIT; scripts/deps.sh k8s k8s-up && \
	  $(GO) run -tags $(TAGS) ./cmd/sandbash-bench -sandbash bin/sandbash -backends kubernetes $(BENCHFLAGS)

.PHONY: fuzz
fuzz: ## fuzz the mount-policy checker, the terminal filter and the egress rule parser, FUZZTIME each
	$(GOTEST) -run '^$$' -fuzz FuzzCheckPaths -fuzztime $(FUZZTIME) ./workspace
	$(GOTEST) -run '^$$' -fuzz FuzzFilter -fuzztime $(FUZZTIME) ./internal/termsafe
	$(GOTEST) -run '^$$' -fuzz FuzzParseRule -fuzztime $(FUZZTIME) ./internal/egress

.PHONY: clean
clean: ## remove build output
	rm -rf bin
