# tierflow — see README.md.
SHELL := /bin/bash
GO ?= go
OUT := _output

.PHONY: all build test unit deps lint demo
all: build

deps: ## install the Debian packages the tests and the demo need
	@test/tools/install-deps.sh

build: ## build every command into _output/bin
	@mkdir -p $(OUT)/bin
	$(GO) build -o $(OUT)/bin/ ./cmd/...

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet ./...

test: deps lint ## every test: unit, real OVS, real kube-apiserver
	$(GO) test -count=1 ./...
