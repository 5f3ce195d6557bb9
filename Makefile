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
	$(GO) vet -tags clustere2e ./test/clustere2e/

# The upstream conformance suites run last, alone: v0.1.7 probes once,
# right after each policy change, with no retry (upstream's TODO in
# PokeServer), so its results should not depend on what else the two cores
# are doing. Other real-OVS packages wait for its bed's OVS lock anyway.
# The package also runs the cyclonus smoke through ClusterIPs and Service
# names (TestCyclonus, an encap bed of its own: about 7 minutes).
#
# The real-cluster smoke test (test/cluster: tierflow's images built and
# installed on node containers with real kubelets) runs after them, alone
# too: it needs the CPU for its image builds and its nodes.
test: deps lint kube-binaries ## every test: unit, real OVS, real kube-apiserver, upstream conformance, the real-cluster smoke test
	$(GO) test -count=1 -timeout 60m $$($(GO) list ./... | grep -v -e '/test/conformance$$' -e '/test/cluster$$')
	$(GO) test -count=1 -timeout 60m ./test/conformance/
	$(GO) test -count=1 -timeout 60m ./test/cluster/

.PHONY: test-ovs
test-ovs: deps ## the OVS layer alone: test/ovsenv, pkg/ovs/openflow, pkg/ovs/ovsdb (real OVS, root)
	$(GO) test -count=1 ./test/ovsenv ./pkg/ovs/...

.PHONY: test-pipeline
test-pipeline: deps ## the agent's OpenFlow pipeline: compiler unit tests and real-OVS policy tests (root)
	$(GO) test -count=1 ./pkg/agent/pipeline ./pkg/agent/policyflows ./pkg/agent/flowsync ./pkg/agent/metrics ./pkg/agent/realizer

.PHONY: test-agent
test-agent: deps kube-binaries ## the agent process: cmd/tierflow-agent and pkg/agent/runtime (real OVS, real kube-apiserver, the controller binary)
	$(GO) test -count=1 ./cmd/tierflow-agent ./pkg/agent/runtime/...

# Kubernetes binaries for the real kube-apiserver test harness (test/kubeapi),
# built from the separate module in build/kube. Cached: rebuilt only when
# build/kube/go.mod or go.sum is newer than the binaries.
KUBE_BINS := kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy agnhost
KUBE_PKGS := $(addprefix k8s.io/kubernetes/cmd/,kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy) \
	k8s.io/kubernetes/test/images/agnhost
KUBE_VERSION := v1.31.4
KUBE_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=31 \
	-X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=31
.PHONY: kube-binaries crds
kube-binaries: $(addprefix $(OUT)/bin/,$(KUBE_BINS)) ## build the Kubernetes control plane, kubelet, kube-proxy, kubectl and agnhost (cached)

# Serialized with test/kubeapi (which holds the same lock and sets
# TIERFLOW_KUBE_LOCK_HELD when it runs this target) so concurrent builds
# never duplicate the work.
KUBE_LOCK := $(if $(TIERFLOW_KUBE_LOCK_HELD),,flock $(CURDIR)/$(OUT)/.kube-binaries.lock)
$(addprefix $(OUT)/bin/,$(KUBE_BINS)) &: build/kube/go.mod build/kube/go.sum
	@mkdir -p $(OUT)/bin
	cd build/kube && CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off $(KUBE_LOCK) $(GO) build -ldflags '$(KUBE_LDFLAGS)' -o $(CURDIR)/$(OUT)/bin/ \
		$(KUBE_PKGS)
	@touch $(addprefix $(OUT)/bin/,$(KUBE_BINS))

# The network-policy-api CRDs (generated: never edit manifests/crds/ by hand,
# rerun `make crds`). sigs.k8s.io/network-policy-api v0.2.0 ships the
# ClusterNetworkPolicy CRD (copied from its config/crd/experimental, the
# channel that accepts every field of the Go types, so the controller sees
# and reports what it does not support) but only the Go types of
# AdminNetworkPolicy and BaselineAdminNetworkPolicy (v1alpha1): those two are
# generated from the types with controller-gen, pinned in build/crdgen at the
# version network-policy-api itself uses, and given the same
# api-approved.kubernetes.io annotation as the upstream CRD (the API server
# requires one for the protected *.k8s.io group).
CONTROLLER_GEN := $(OUT)/tools/controller-gen
$(CONTROLLER_GEN): build/crdgen/go.mod build/crdgen/go.sum
	@mkdir -p $(dir $@)
	cd build/crdgen && GOWORK=off $(GO) build -o $(CURDIR)/$@ sigs.k8s.io/controller-tools/cmd/controller-gen

crds: $(CONTROLLER_GEN) ## generate manifests/crds from sigs.k8s.io/network-policy-api (pinned in go.mod)
	@set -euo pipefail; \
	dir=$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/network-policy-api); \
	ver=$$($(GO) list -m -f '{{.Version}}' sigs.k8s.io/network-policy-api); \
	test -d "$$dir/apis/v1alpha1" || { echo "crds: $$dir/apis/v1alpha1 not found"; exit 1; }; \
	work=$$(mktemp -d); trap 'chmod -R u+w "$$work"; rm -rf "$$work"' EXIT; \
	cp -r "$$dir" "$$work/src"; chmod -R u+w "$$work/src"; \
	(cd "$$work/src" && GOWORK=off GOFLAGS=-mod=mod $(CURDIR)/$(CONTROLLER_GEN) crd paths=./apis/v1alpha1/... output:crd:dir="$$work/out"); \
	mkdir -p manifests/crds; \
	approval=$$(grep -m1 'api-approved.kubernetes.io:' "$$dir/config/crd/experimental/policy.networking.k8s.io_clusternetworkpolicies.yaml" | sed 's/.*api-approved.kubernetes.io: *//'); \
	test -n "$$approval" || { echo "crds: no api-approved.kubernetes.io annotation in the upstream CRD"; exit 1; }; \
	for kind in adminnetworkpolicies baselineadminnetworkpolicies; do \
		f=policy.networking.k8s.io_$$kind.yaml; \
		test -s "$$work/out/$$f" || { echo "crds: controller-gen did not produce $$f"; exit 1; }; \
		{ echo "# Generated by 'make crds' with controller-gen from sigs.k8s.io/network-policy-api@$$ver apis/v1alpha1. Do not edit."; \
		  sed "0,/^  annotations:$$/s||  annotations:\n    api-approved.kubernetes.io: $$approval\n    policy.networking.k8s.io/bundle-version: $$ver|" "$$work/out/$$f"; } > manifests/crds/$$f; \
		grep -q "api-approved.kubernetes.io: $$approval" manifests/crds/$$f || { echo "crds: could not annotate $$f"; exit 1; }; \
	done; \
	f=policy.networking.k8s.io_clusternetworkpolicies.yaml; \
	{ echo "# Generated by 'make crds': copied from sigs.k8s.io/network-policy-api@$$ver config/crd/experimental. Do not edit."; cat "$$dir/config/crd/experimental/$$f"; } > manifests/crds/$$f; \
	ls -l manifests/crds

# Installation: manifests/tierflow.yaml rendered from manifests/crds and
# manifests/parts (build/manifestgen), and the two container images
# (build/*/Dockerfile). The defaults reproduce the committed tierflow.yaml.
IMAGE_REPO ?= tierflow
IMAGE_TAG ?= latest
CONTROLLER_IMAGE ?= $(IMAGE_REPO)/tierflow-controller:$(IMAGE_TAG)
AGENT_IMAGE ?= $(IMAGE_REPO)/tierflow-agent:$(IMAGE_TAG)
IMAGE_PULL_POLICY ?= IfNotPresent
DATAPATH_TYPE ?= system
LOG_LEVEL ?= info
CONTROLLER_METRICS_PORT ?= 10350
AGENT_METRICS_PORT ?= 10351
POD_MTU ?= 0
NODE_NETWORK_MODE ?= encap
TUNNEL_TYPE ?= geneve
CONTROLLER_MEMORY_REQUEST ?= 2Gi
CONTROLLER_MEMORY_LIMIT ?= 3Gi
MANIFESTS_OUT ?= manifests/tierflow.yaml
# The uninstall step's manifest goes next to the release manifest.
CLEANUP_MANIFESTS_OUT ?= $(dir $(MANIFESTS_OUT))tierflow-cleanup.yaml
DOCKER ?= docker
.PHONY: manifests images image-controller image-agent container-engine
manifests: ## render manifests/tierflow.yaml and tierflow-cleanup.yaml (CONTROLLER_IMAGE, AGENT_IMAGE, DATAPATH_TYPE, LOG_LEVEL, *_METRICS_PORT, POD_MTU, NODE_NETWORK_MODE, TUNNEL_TYPE, CONTROLLER_MEMORY_*; see manifests/README.md)
	$(GO) run ./build/manifestgen -o $(MANIFESTS_OUT) -cleanup-o $(CLEANUP_MANIFESTS_OUT) \
		--controller-image='$(CONTROLLER_IMAGE)' --agent-image='$(AGENT_IMAGE)' \
		--image-pull-policy='$(IMAGE_PULL_POLICY)' --datapath-type='$(DATAPATH_TYPE)' --log-level='$(LOG_LEVEL)' \
		--controller-metrics-port='$(CONTROLLER_METRICS_PORT)' --agent-metrics-port='$(AGENT_METRICS_PORT)' --pod-mtu='$(POD_MTU)' \
		--node-network-mode='$(NODE_NETWORK_MODE)' --tunnel-type='$(TUNNEL_TYPE)' \
		--controller-memory-request='$(CONTROLLER_MEMORY_REQUEST)' --controller-memory-limit='$(CONTROLLER_MEMORY_LIMIT)'

images: image-controller image-agent ## build both container images with $(DOCKER) (see build/README.md)

container-engine:
	@command -v $(DOCKER) >/dev/null 2>&1 || { echo "images: '$(DOCKER)' not found: install Docker (or set DOCKER=podman); see build/README.md" >&2; exit 1; }
	@$(DOCKER) info >/dev/null 2>&1 || { echo "images: no container engine reachable ('$(DOCKER) info' failed): start the Docker daemon; see build/README.md" >&2; exit 1; }

# The build context is the repository's files as git sees them (tracked and
# untracked, not ignored), copied to $(IMAGE_CONTEXT): .git and _output
# stay out with every builder (Docker's legacy builder and podman read no
# Dockerfile.dockerignore). BASE_IMAGE and GO_IMAGE, when set, replace the
# Dockerfiles' public bases (an offline machine: make base-images).
BASE_IMAGE ?=
GO_IMAGE ?=
IMAGE_BUILD_ARGS = $(if $(BASE_IMAGE),--build-arg BASE_IMAGE='$(BASE_IMAGE)') $(if $(GO_IMAGE),--build-arg GO_IMAGE='$(GO_IMAGE)')
IMAGE_CONTEXT := $(OUT)/image-context
.PHONY: image-context
image-context:
	@rm -rf $(IMAGE_CONTEXT) && mkdir -p $(IMAGE_CONTEXT)
	@{ git ls-files -z --cached --others --exclude-standard 2>/dev/null || \
	   find . \( -path ./.git -o -path ./$(OUT) \) -prune -o -type f -print0; } | \
	  tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C $(IMAGE_CONTEXT)

image-controller: container-engine image-context
	$(DOCKER) build -f $(IMAGE_CONTEXT)/build/controller/Dockerfile $(IMAGE_BUILD_ARGS) -t '$(CONTROLLER_IMAGE)' $(IMAGE_CONTEXT)

image-agent: container-engine image-context
	$(DOCKER) build -f $(IMAGE_CONTEXT)/build/agent/Dockerfile $(IMAGE_BUILD_ARGS) -t '$(AGENT_IMAGE)' $(IMAGE_CONTEXT)

# The real test cluster (test/cluster): node containers with containerd,
# the kubelet and kube-proxy, the control plane on the first node, CoreDNS;
# every image built here from Debian packages and Go modules. NODES counts
# every node. Nodes stay NotReady until tierflow is installed on them (the
# README's "Install on a real cluster").
CLUSTER_DIR ?= $(OUT)/cluster
CLUSTER_TOOL := $(OUT)/bin/tierflow-cluster
CLUSTER_BINS := $(addprefix $(OUT)/bin/,$(KUBE_BINS) coredns pause agnhost-wrapper cyclonus-worker)
.PHONY: cluster-prereqs cluster-up cluster-down cluster-load-images base-images e2e-cluster
cluster-prereqs: deps kube-binaries $(OUT)/bin/coredns $(OUT)/bin/pause $(OUT)/bin/agnhost-wrapper $(OUT)/bin/cyclonus-worker ## what make cluster-up needs: Debian's docker.io, containerd, runc, mmdebstrap; the node and image binaries
	@test/tools/install-deps.sh cluster
	@$(GO) build -o $(OUT)/bin/ ./test/cluster/cmd/tierflow-cluster

$(OUT)/bin/coredns: build/coredns/go.mod build/coredns/go.sum build/coredns/main.go
	@mkdir -p $(OUT)/bin
	cd build/coredns && CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off $(GO) build -ldflags '-s -w' -o $(CURDIR)/$@ .

$(OUT)/bin/pause: test/cluster/cmd/pause/main.go
	@mkdir -p $(OUT)/bin
	CGO_ENABLED=0 $(GO) build -ldflags '-s -w' -o $@ ./test/cluster/cmd/pause

$(OUT)/bin/agnhost-wrapper: test/cluster/cmd/agnhost-wrapper/main.go
	@mkdir -p $(OUT)/bin
	CGO_ENABLED=0 $(GO) build -ldflags '-s -w' -o $@ ./test/cluster/cmd/agnhost-wrapper

# /worker of the cyclonus-worker image (cyclonus's batch prober).
$(OUT)/bin/cyclonus-worker: go.mod test/cyclonus/cmd/cyclonus-worker/main.go
	@mkdir -p $(OUT)/bin
	CGO_ENABLED=0 $(GO) build -ldflags '-s -w' -o $@ ./test/cyclonus/cmd/cyclonus-worker

cluster-up: cluster-prereqs ## bring up the real cluster (NODES=n, 3 by default; state, kubeconfig and cluster.env in $(CLUSTER_DIR))
	$(CLUSTER_TOOL) up --dir $(CLUSTER_DIR) --nodes='$(NODES)' --bin-dir $(OUT)/bin

cluster-down: ## remove the real cluster and everything it left on this machine
	@test -x $(CLUSTER_TOOL) || $(GO) build -o $(OUT)/bin/ ./test/cluster/cmd/tierflow-cluster
	$(CLUSTER_TOOL) down --dir $(CLUSTER_DIR)

cluster-load-images: ## copy tierflow's images (CONTROLLER_IMAGE, AGENT_IMAGE) into every node of the real cluster
	@test -x $(CLUSTER_TOOL) || $(GO) build -o $(OUT)/bin/ ./test/cluster/cmd/tierflow-cluster
	$(CLUSTER_TOOL) load-images --dir $(CLUSTER_DIR) '$(CONTROLLER_IMAGE)' '$(AGENT_IMAGE)'

base-images: ## build stand-ins for the Dockerfiles' public bases from Debian packages and print BASE_IMAGE=... GO_IMAGE=...
	@test -x $(CLUSTER_TOOL) || $(GO) build -o $(OUT)/bin/ ./test/cluster/cmd/tierflow-cluster
	@$(CLUSTER_TOOL) base-images --dir $(CLUSTER_DIR)

# tierflow on the real cluster (test/clustere2e): tierctl through kubectl
# exec, both upstream conformance suites, cyclonus's generated cases (a
# fixed subset: 28 of 126, to pod IPs, Service IPs and Service names),
# faults under continuous probes, uninstall. Brings up its own cluster (or
# TIERFLOW_E2E_CLUSTER_DIR=_output/cluster: one that is up with tierflow
# installed) and ends with `N passed, M failed, K skipped`. E2E_RUN picks
# parts (a go test -run pattern), e.g.
# E2E_RUN='TestRealCluster/(Tierctl|Conformance|Faults|Uninstall)';
# E2E_ARGS goes to the test binary.
E2E_RUN ?= .
E2E_ARGS ?=
e2e-cluster: cluster-prereqs ## tierflow on a real cluster: tierctl, conformance, a cyclonus subset, faults, uninstall (test/clustere2e; about 40 minutes on two busy cores; E2E_RUN=pattern for parts)
	@mkdir -p $(OUT)/e2e-cluster
	@set -o pipefail; $(GO) test -tags clustere2e -count=1 -json -timeout 420m -run '$(E2E_RUN)' ./test/clustere2e/ -args $(E2E_ARGS) | \
		tee $(OUT)/e2e-cluster/go-test.jsonl | $(GO) run ./test/clustere2e/cmd/testsummary

# Every case cyclonus generates (126, TCP and UDP) on the real cluster, to
# pod IPs, Service IPs and Service names (about 50 minutes).
.PHONY: e2e-cluster-cyclonus
e2e-cluster-cyclonus: ## cyclonus's every generated case on a real cluster (test/clustere2e, -cyclonus-include=)
	@$(MAKE) --no-print-directory e2e-cluster E2E_RUN='TestRealCluster/Cyclonus' E2E_ARGS='-cyclonus-include='

# Simulated cluster for demos (test/testbed): real kube-apiserver, kwok nodes,
# private OVS, pods as network namespaces attached by tierflow-cni.
# It runs tierflow (controller + one agent per node) unless TESTBED_FLAGS
# has --normal-flows (NORMAL flows, no tierflow). TESTBED_FLAGS e.g. "--ipv6",
# or "--encap" (every node its own namespace and OVS behind a router, the
# agents in encap mode).
TESTBED_DIR ?= $(OUT)/testbed
TESTBED_FLAGS ?=
NODES ?= 3
.PHONY: testbed-up testbed-down
testbed-up: deps kube-binaries ## start the simulated cluster with tierflow in the background (NODES=n; state in $(TESTBED_DIR))
	@mkdir -p $(OUT)/bin
	$(GO) build -o $(OUT)/bin/ ./test/testbed/cmd/tierflow-testbed
	$(OUT)/bin/tierflow-testbed up --dir $(TESTBED_DIR) --nodes $(NODES) $(TESTBED_FLAGS)

testbed-down: ## stop the simulated cluster; fails if anything had been left behind
	@test -x $(OUT)/bin/tierflow-testbed || $(GO) build -o $(OUT)/bin/ ./test/testbed/cmd/tierflow-testbed
	$(OUT)/bin/tierflow-testbed down --dir $(TESTBED_DIR)

.PHONY: test-distribution bench-distribution
test-distribution: ## controller↔agent distribution: stream, deltas, resync, TokenReview auth (real kube-apiserver), state store
	$(GO) test -count=1 ./pkg/distribution/... ./pkg/agent/nodatapath

bench-distribution: ## fan-out to 100 and 200 datapath-less agents: time until every agent holds a change
	$(GO) test -count=1 -run '^$$' -bench BenchmarkFanOut -benchtime=20x ./pkg/distribution/server/

# Benchmark report (test/bench): every scenario in its own process, progress
# on stdout, results in _output/bench/report.md and report.json. Numbers are
# reports, never pass/fail. BENCH_QUICK=1: reduced scales, same code paths,
# a few minutes. BENCH_ONLY=REGEXP: only the runs whose ID matches;
# BENCH_MERGE=1: keep the last report's other runs.
.PHONY: bench
bench: deps kube-binaries ## benchmark report into _output/bench (BENCH_QUICK=1: quick mode; BENCH_ONLY=regexp)
	@mkdir -p $(OUT)/bench
	$(GO) build -o $(OUT)/bench/benchreport ./test/bench/cmd/benchreport
	GO=$(GO) $(OUT)/bench/benchreport --out $(OUT)/bench

.PHONY: test-controller
test-controller: kube-binaries ## the kube-apiserver harness, the controller and its command, on real etcd + kube-apiserver
	$(GO) test -count=1 ./test/kubeapi/... ./pkg/controller/... ./cmd/tierflow-controller/...

.PHONY: test-tierctl
test-tierctl: deps kube-binaries ## tierctl: offline explain, and every live command against a real kube-apiserver, controller and agents on OVS (root)
	$(GO) test -count=1 ./pkg/queryapi/... ./cmd/tierctl/...

# make demo (test/demo): the simulated cluster with tierflow, the four
# houses, policies of every tier, explain and flows. DEMO_KEEP=1 (default)
# leaves it running (stop: make testbed-down); DEMO_KEEP=0 tears it down.
DEMO_KEEP ?= 1
DEMO_NODES ?= 2
demo: ## walk through tierflow on the simulated cluster (DEMO_KEEP=0: tear down at the end; DEMO_NODES=n)
	@GO=$(GO) DEMO_KEEP=$(DEMO_KEEP) DEMO_NODES=$(DEMO_NODES) test/demo/demo.sh

# The Service proxy (pkg/agent/proxy): its unit and real-OVS tests, the
# agent with a real kube-apiserver (noEncap, bad input), and on the
# simulated cluster the endpoint churn of issue 16 at full size: 100
# backend changes under continuous client load (make test runs 20).
.PHONY: test-services
test-services: deps kube-binaries ## the Service proxy: real OVS, agent on a real API server, and the 100-change endpoint churn on the test bed
	$(GO) test -count=1 ./pkg/services/... ./pkg/agent/proxy/...
	$(GO) test -count=1 -timeout 30m -run 'Service|Groups|PacketIn|FlushConntrack' ./pkg/ovs/openflow/ ./pkg/agent/realizer/ ./pkg/agent/runtime/
	$(GO) test -count=1 -timeout 60m -v -run '^TestEndpointChurn$$' ./test/e2e/ -args -churn-changes=100

.PHONY: test-e2e
test-e2e: deps kube-binaries ## the end-to-end scenarios on the simulated cluster (test/e2e; root)
	$(GO) test -count=1 -timeout 60m -v ./test/e2e/...

# Upstream network-policy-api conformance (test/conformance): brings up its
# own test bed with tierflow (stop a `make testbed-up` bed first: one
# private OVS per host), runs the v0.1.7 (AdminNetworkPolicy,
# BaselineAdminNetworkPolicy) and v0.2.0 (ClusterNetworkPolicy) suites,
# writes their reports into _output/conformance and ends with the tally.
# `make test` runs the same test (go test ./...).
.PHONY: conformance
conformance: deps kube-binaries ## upstream conformance suites against the test bed; reports in _output/conformance
	@rc=0; $(GO) test -count=1 -v -timeout 80m -run '^TestUpstreamConformance$$' ./test/conformance/ || rc=$$?; \
	if [ -s $(OUT)/conformance/results.txt ]; then cat $(OUT)/conformance/results.txt | head -n -1; fi; \
	if [ -s $(OUT)/conformance/summary.txt ]; then cat $(OUT)/conformance/summary.txt; else echo "conformance: no results (see the go test output above)"; rc=1; fi; \
	exit $$rc

.PHONY: test-encap
# Encap mode in full (issue 18): the TestEncap tests of pkg/agent (make test
# runs them too: the two-node routed bed, bad configuration, and a smoke of
# the encap test bed: three e2e scenarios' matrices and two tests of each
# upstream conformance suite), then every e2e scenario and both upstream
# conformance suites on the encap test bed (testbed.Options.Encap: every
# node its own namespace and OVS, behind a router that drops pod
# addresses). Conformance reports in _output/conformance-encap. About half
# an hour.
test-encap: deps kube-binaries ## encap mode in full: TestEncap tests, every e2e scenario and both conformance suites on the encap test bed
	$(GO) test -count=1 -timeout 30m -run '^TestEncap' ./pkg/agent/...
	TIERFLOW_TESTBED_ENCAP=1 $(GO) test -count=1 -timeout 60m ./test/e2e/
	@rc=0; TIERFLOW_TESTBED_ENCAP=1 $(GO) test -count=1 -v -timeout 80m -run '^TestUpstreamConformance$$' ./test/conformance/ || rc=$$?; \
	if [ -s $(OUT)/conformance-encap/summary.txt ]; then cat $(OUT)/conformance-encap/summary.txt; else echo "conformance (encap): no results (see the go test output above)"; rc=1; fi; \
	exit $$rc

# cyclonus's every generated case (126 with TCP and UDP, SCTP left out) on
# the encap test bed, probed through Service IPs and Service names with
# cyclonus's batch prober (test/cyclonus/cmd/cyclonus-batch). make test
# runs a smoke of it (TestCyclonus's default tags).
.PHONY: cyclonus
cyclonus: deps kube-binaries ## cyclonus's full generated suite on the test bed through Service IPs and names; reports in _output/conformance
	$(GO) test -count=1 -v -timeout 12h -run '^TestCyclonus$$' ./test/conformance/ -args -cyclonus-include= -cyclonus-destinations=service-ip,service-name

.PHONY: test-compute fuzz-compute
test-compute: ## the policy computation engine (pkg/compute): table, incremental, fuzz-seed and race tests
	$(GO) test -race -count=1 ./pkg/compute/...

fuzz-compute: ## fuzz pkg/compute, 30 s per target (new inputs land in the Go fuzz cache)
	$(GO) test -run '^$$' -fuzz '^FuzzPolicyObjects$$' -fuzztime 30s ./pkg/compute/
	$(GO) test -run '^$$' -fuzz '^FuzzIncremental$$' -fuzztime 30s ./pkg/compute/
