# sandbash — `make help` lists the targets.

GO          ?= go
GOTEST      ?= $(GO) test
TESTFLAGS   ?= -race
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 30s

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*?## "} /^[a-zA-Z_-]+:.*?## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/sandbash
	$(GO) build -o bin/sandbash ./cmd/sandbash

.PHONY: deps
deps: ## install and start what the tests need: bubblewrap, Docker, the test images
	@scripts/deps.sh bwrap images docker docker-images

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt: these files need 'gofmt -w':"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

.PHONY: test
test: deps lint ## everything: lint, then all tests (unit, conformance, CLI) with the race detector
	$(GOTEST) $(TESTFLAGS) -count=1 ./...

.PHONY: integration
integration: deps ## only the end-to-end CLI tests
	$(GOTEST) $(TESTFLAGS) -count=1 ./integration/...

.PHONY: images
images: ## (re)build the local test images (bash-static + busybox-static; a Go variant) into docker
	@scripts/deps.sh images docker
	scripts/images.sh docker

.PHONY: bench
bench: ## per-call time through sandbash (warm, cold) vs the engine's CLI, same run
	$(GO) run ./cmd/sandbash-bench -backend docker -image sandbash-test:latest

.PHONY: fuzz
fuzz: ## fuzz the mount-policy checker for FUZZTIME
	$(GOTEST) -run '^$$' -fuzz FuzzCheckPaths -fuzztime $(FUZZTIME) ./workspace

.PHONY: clean
clean: ## remove build output
	rm -rf bin
