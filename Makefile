# watchprobe: `make demo` to see it run, `make test` to check it.

GO      ?= go
BIN     := $(CURDIR)/bin
# The one version: the binary, the image tag, the chart (a test keeps them equal).
VERSION := $(shell cat $(CURDIR)/VERSION)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)

CONTROLPLANE := hack/tools/controlplane
HELM_TOOLS   := hack/tools/helm
PROM_TOOLS   := hack/tools/prometheus
LINT_TOOLS   := hack/tools/staticcheck
ACTIONLINT_TOOLS := hack/tools/actionlint
DOCS_TOOLS   := hack/tools/helm-docs
RELOADER_TOOLS := hack/tools/reloader
# Debian's package: Alertmanager does not build from the module proxy (its UI
# assets are not in the module).
ALERTMANAGER ?= /usr/bin/prometheus-alertmanager

.PHONY: all bench build chart-readme controlplane dashboards demo rules test vet lint fmt-check clean

all: build

# The exporter and the node agent. hack/build.sh is also what the
# Dockerfile runs.
build:
	hack/build.sh $(BIN)/watchprobe $(VERSION) $(REVISION)
	hack/build.sh $(BIN)/watchprobe-agent $(VERSION) $(REVISION) ./cmd/agent

# The image without a container engine (hack/image): hack/build.sh's
# exporter (/bin/watchprobe, the entrypoint) and node agent
# (/bin/watchprobe-agent, which the chart's DaemonSet runs) for
# linux/amd64 and linux/arm64, on an empty base with the nonroot user and CA
# certificates. Writes an OCI layout to $(OUT)/image and prints
# $(IMAGE):$(VERSION), the chart's default image; PUSH=registry/repo also
# pushes it as $(PUSH):$(VERSION).
IMAGE ?= ghcr.io/watchprobe/watchprobe
OUT   ?= out
.PHONY: image release
image:
	$(GO) run ./hack/image -version $(VERSION) -revision $(REVISION) -repository $(IMAGE) -o $(OUT)/image $(if $(PUSH),-push $(PUSH))

# Everything a user installs from, in one registry (hack/release): the
# image as `make image` builds it, a CycloneDX SBOM of its Go modules as the
# image's OCI referrer, and the chart packaged with the image pinned by
# digest, pushed with helm to oci://<PUSH's parent>/charts/watchprobe
# (CHARTS=oci://registry/path elsewhere). Prints the digests and the
# `helm install oci://...` command. PLAIN_HTTP=1 for a registry without TLS.
# Without PUSH, writes the SBOM and the chart to $(OUT)/release only.
release: $(BIN)/helm
	$(MAKE) --no-print-directory image PUSH= >/dev/null
	$(GO) run ./hack/release -version $(VERSION) -layout $(OUT)/image -o $(OUT)/release -helm $(BIN)/helm -repository $(IMAGE) \
		$(if $(PUSH),-push $(PUSH)) $(if $(CHARTS),-charts $(CHARTS)) $(if $(PLAIN_HTTP),-plain-http)

# kube-apiserver and etcd, pinned in $(CONTROLPLANE)/go.mod, and the node
# (internal/localcluster's StartNode) beside them. Rebuilt only when that pin
# changes; Go's build cache makes a rebuild take seconds. The Kubernetes
# binaries come from one `go build`, so the packages they share (most of
# k8s.io/kubernetes) are compiled once, not once per binary.
KUBE_BINARIES := kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy
# The version stamps of Kubernetes' own build (hack/lib/version.sh), read
# from the tools module $(1) pins: without them the binaries report
# v0.0.0-master, which /version serves and which no chart's kubeVersion
# admits, so `helm install` of the chart would refuse the test clusters.
# Recursive, so that go list runs only when a binary is built.
kube_version = $(shell cd $(1) && $(GO) list -m -f '{{.Version}}' k8s.io/kubernetes)
kube_ldflags = $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(p).gitVersion=$(call kube_version,$(1)) -X $(p).gitMajor=1 \
	-X $(p).gitMinor=$(word 2,$(subst ., ,$(call kube_version,$(1)))) -X $(p).gitTreeState=clean)
controlplane: $(addprefix $(BIN)/,$(KUBE_BINARIES)) $(BIN)/etcd

$(addprefix $(BIN)/,$(KUBE_BINARIES)) &: $(CONTROLPLANE)/go.mod $(CONTROLPLANE)/go.sum
	@echo ">> building $(KUBE_BINARIES) as $(CONTROLPLANE)/go.mod pins them, from the Go module proxy."
	@echo "   Minutes the first time (docs/performance.md); later builds are cached."
	cd $(CONTROLPLANE) && $(GO) build -ldflags "$(call kube_ldflags,$(CONTROLPLANE))" -o $(BIN)/ $(addprefix k8s.io/kubernetes/cmd/,$(KUBE_BINARIES))

# The node's sandbox image: a static binary that holds a pod's namespaces.
$(BIN)/pause: internal/localcluster/pause/main.go
	CGO_ENABLED=0 $(GO) build -o $@ ./internal/localcluster/pause

$(BIN)/etcd: $(CONTROLPLANE)/go.mod $(CONTROLPLANE)/go.sum
	@echo ">> building etcd as $(CONTROLPLANE)/go.mod pins it, from the Go module proxy"
	cd $(CONTROLPLANE) && $(GO) build -o $@ go.etcd.io/etcd/server/v3

# The other control planes `make compat` runs against: one tools module per
# minor (hack/tools/controlplane-<minor>, pinning a patch release, its
# staging modules and the etcd it requires), built into bin/<minor>/; and
# etcd's older minor, for the newest apiserver, into bin/etcd-<minor>/.
# Each is rebuilt only when its go.mod changes. internal/localcluster
# picks them by WATCHPROBE_KUBE_VERSION and WATCHPROBE_ETCD_VERSION.
COMPAT_MINORS := 1.31 1.32 1.33 1.34 1.35 1.36
COMPAT_ETCD   := 3.6
COMPAT_BINS   := $(foreach m,$(COMPAT_MINORS),$(BIN)/$(m)/kube-apiserver $(BIN)/$(m)/etcd) \
	$(foreach m,$(COMPAT_ETCD),$(BIN)/etcd-$(m)/etcd)

.PHONY: compat compat-controlplanes
compat-controlplanes: controlplane $(COMPAT_BINS)

$(BIN)/etcd-%/etcd: hack/tools/etcd-%/go.mod hack/tools/etcd-%/go.sum
	@echo ">> building etcd $* (the patch release pinned in hack/tools/etcd-$*/go.mod)"
	cd hack/tools/etcd-$* && $(GO) build -o $@ go.etcd.io/etcd/server/v3

$(BIN)/%/kube-apiserver: hack/tools/controlplane-%/go.mod hack/tools/controlplane-%/go.sum
	@echo ">> building kube-apiserver $* (the patch release pinned in hack/tools/controlplane-$*/go.mod)"
	@echo "   Minutes the first time (docs/performance.md); later builds are cached."
	cd hack/tools/controlplane-$* && $(GO) build -ldflags "$(call kube_ldflags,hack/tools/controlplane-$*)" -o $@ k8s.io/kubernetes/cmd/kube-apiserver

$(BIN)/%/etcd: hack/tools/controlplane-%/go.mod hack/tools/controlplane-%/go.sum
	@echo ">> building the etcd kubernetes $* pins"
	cd hack/tools/controlplane-$* && $(GO) build -o $@ go.etcd.io/etcd/server/v3

# The core live tests against every control plane above and the default
# one (hack/compat): the table of what passed goes into
# docs/compatibility.md. The gate before a release; its last run is
# recorded in CHANGELOG.md.
compat: compat-controlplanes
	$(GO) run ./hack/compat -bin-dir $(BIN)

# With the version ldflags of helm's own Makefile: its version, and the
# Kubernetes version `helm template` assumes without a cluster, from the
# client-go it links (v0.37: 1.37). Without them helm assumes 1.20 and
# refuses the chart's kubeVersion unless given --kube-version.
# Recursive, so that go list runs only when helm is built.
HELM_VERSION = $(shell cd $(HELM_TOOLS) && $(GO) list -m -f '{{.Version}}' helm.sh/helm/v3)
HELM_KUBE_MINOR = $(shell cd $(HELM_TOOLS) && $(GO) list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)
HELM_LDFLAGS = -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/internal/version.metadata= -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
	$(foreach p,pkg/chartutil pkg/lint/rules,-X helm.sh/helm/v3/$(p).k8sVersionMajor=1 -X helm.sh/helm/v3/$(p).k8sVersionMinor=$(HELM_KUBE_MINOR))

$(BIN)/helm: $(HELM_TOOLS)/go.mod $(HELM_TOOLS)/go.sum
	@echo ">> building helm as $(HELM_TOOLS)/go.mod pins it, from the Go module proxy"
	cd $(HELM_TOOLS) && $(GO) build -trimpath -ldflags "$(HELM_LDFLAGS)" -o $@ helm.sh/helm/v3/cmd/helm

# promtool checks the rules; prometheus runs them in the end-to-end test.
$(BIN)/promtool: $(PROM_TOOLS)/go.mod $(PROM_TOOLS)/go.sum
	@echo ">> building Prometheus and promtool as $(PROM_TOOLS)/go.mod pins them, from the Go module proxy (minutes the first time)"
	cd $(PROM_TOOLS) && $(GO) build -o $(BIN)/ github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool

# The chart's configReloader sidecar, which the install test runs on the node
# as an image of its own.
$(BIN)/prometheus-config-reloader: $(RELOADER_TOOLS)/go.mod $(RELOADER_TOOLS)/go.sum
	cd $(RELOADER_TOOLS) && CGO_ENABLED=0 $(GO) build -o $@ github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader

$(BIN)/staticcheck: $(LINT_TOOLS)/go.mod $(LINT_TOOLS)/go.sum
	cd $(LINT_TOOLS) && $(GO) build -o $@ honnef.co/go/tools/cmd/staticcheck

# Checks the GitHub Actions workflows in .github/workflows.
$(BIN)/actionlint: $(ACTIONLINT_TOOLS)/go.mod $(ACTIONLINT_TOOLS)/go.sum
	cd $(ACTIONLINT_TOOLS) && $(GO) build -o $@ github.com/rhysd/actionlint/cmd/actionlint

$(BIN)/helm-docs: $(DOCS_TOOLS)/go.mod $(DOCS_TOOLS)/go.sum
	cd $(DOCS_TOOLS) && $(GO) build -o $@ github.com/norwoodj/helm-docs/cmd/helm-docs

$(ALERTMANAGER):
	@echo ">> installing Debian's prometheus-alertmanager (apt-get, as root)"
	@[ "$$(id -u)" = 0 ] || { echo "installing Alertmanager needs root: sudo apt-get install prometheus-alertmanager, or set ALERTMANAGER"; exit 1; }
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus-alertmanager

# ip (iproute2) builds the network namespaces of the highly available local
# control plane: each apiserver needs an address the kubernetes
# EndpointSlice accepts, which loopback is not.
.PHONY: iproute2
iproute2:
	@command -v ip >/dev/null || { \
		[ "$$(id -u)" = 0 ] || { echo "the HA control plane tests need iproute2 and root: sudo apt-get install iproute2"; exit 1; }; \
		echo ">> installing Debian's iproute2 (apt-get, as root)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2; }

# The node of the chart's install test (internal/localcluster's StartNode):
# containerd with runc and the CNI plugins runs its pods, kube-proxy's
# iptables mode needs iptables and conntrack, and the node's teardown removes
# the nftables tables kubelet made with nft. The lock timeout waits out
# another apt-get on the same machine.
NODE_PACKAGES := containerd runc containernetworking-plugins iptables conntrack nftables
.PHONY: node-packages
node-packages:
	@missing=; for c in containerd ctr runc iptables conntrack nft /usr/lib/cni/bridge; do \
		command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	[ -z "$$missing" ] || { \
		[ "$$(id -u)" = 0 ] || { echo "the node tests need$$missing and root: sudo apt-get install $(NODE_PACKAGES)"; exit 1; }; \
		echo ">> installing Debian's $(NODE_PACKAGES) (apt-get, as root)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			-o DPkg::Lock::Timeout=600 $(NODE_PACKAGES); }

# The dashboard with the chart's default values, and the chart's copy (it
# cannot read files outside itself) with placeholders for the release's
# values; tests keep both current.
dashboards:
	$(GO) run ./dashboards -o dashboards/watchprobe.json -chart-template charts/watchprobe/files/watchprobe.json

# The chart's rules template rendered with its default values; a test keeps
# rules/watchprobe.rules.yml equal to it.
rules: $(BIN)/helm
	WATCHPROBE_BIN_DIR=$(BIN) $(GO) test ./rules -run '^Test(Rules|Inhibit)FileIsTheChartDefault$$' -count=1 -update

# charts/watchprobe/README.md from values.yaml; charts/chart_test.go runs the
# same command and fails when the README differs.
chart-readme: $(BIN)/helm-docs
	$(BIN)/helm-docs --chart-search-root charts/watchprobe --sort-values-order file

demo: build controlplane
	$(GO) build -o $(BIN)/demo ./hack/demo
	$(BIN)/demo --bin-dir $(BIN)

# The parts of the docs that come from the code or a run (hack/docs), each
# between BEGIN and END comments; hack/docs' test fails when one is stale.
# docs: the metrics reference from pkg/metrics' registry and the flags from
# the exporter's --help-man. bench-docs: docs/performance.md's tables from
# the last `make bench` (out/bench.md, out/agentcost.md). demo-output:
# README's demo output, from `make demo` run for 30 s.
.PHONY: docs bench-docs demo-output
# make build builds both binaries.
docs: build
	$(GO) run ./hack/docs -exporter $(BIN)/watchprobe -agent $(BIN)/watchprobe-agent

bench-docs:
	$(GO) run ./hack/docs -bench out/bench.md -bench-agents out/agentcost.md

demo-output:
	$(GO) run ./hack/docs -demo 6

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# The bench's reference client has a variant built with the series tag
# (hack/bench/bare/series.go), checked and tested like the rest.
vet:
	$(GO) vet ./...
	$(GO) vet -tags series ./hack/bench/bare

lint: $(BIN)/staticcheck $(BIN)/actionlint
	$(BIN)/staticcheck ./...
	$(BIN)/staticcheck -tags series ./hack/bench/bare
	$(BIN)/actionlint

# Unit tests and tests against the real control plane; -race because the
# probe's paths, sweeper and writer share state. pkg/probe's tests are the
# longest and start first; three packages at a time, and four parallel
# tests in each rather than one per core, since most of their time is spent
# waiting on a control plane or for a history to age, not computing.
test: fmt-check vet lint controlplane $(BIN)/helm $(BIN)/helm-docs $(BIN)/promtool $(ALERTMANAGER) iproute2 \
		$(BIN)/pause $(BIN)/prometheus-config-reloader node-packages
	WATCHPROBE_BIN_DIR=$(BIN) WATCHPROBE_ALERTMANAGER=$(ALERTMANAGER) $(GO) test -race -count=1 -p 3 -parallel 4 -timeout 20m ./pkg/probe ./...
	$(GO) test -race -count=1 -tags series ./hack/bench/bare
	$(MAKE) --no-print-directory fuzz FUZZTIME=60000x

# Performance figures, never pass/fail: the hot path's Go benchmarks, then the
# exporter against bare reference clients and its cost as load grows, on the
# real control plane. Writes out/bench.json, and its tables as Markdown to
# out/bench.md; then what node agents cost the control plane
# (hack/bench/agentcost, below) at BENCH_AGENTS simulated agents, as Markdown
# to out/agentcost.md (about 5 minutes per number). `make bench-docs` puts
# both into docs/performance.md.
BENCH_AGENTS ?= 100,500
bench: build controlplane
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/probe/...
	$(GO) run ./hack/bench -bin-dir $(BIN) -o out/bench.json
	$(GO) run ./hack/bench/agentcost -bin-dir $(BIN) -agents $(BENCH_AGENTS) -o out/agentcost.md

# What the freshness checks cost kube-apiserver (hack/bench/freshcost): CPU
# and LISTs per second per resource and interval, with 10,000 pods in
# another namespace; API Priority and Fairness's seats and waits for each
# form of LIST, and the requests and seats the defaults add; Markdown for
# docs/performance.md on stdout.
.PHONY: bench-freshness
bench-freshness: controlplane
	$(GO) run ./hack/bench/freshcost -bin-dir $(BIN)

# What the WatchList sync checks cost kube-apiserver (hack/bench/watchlistcost):
# APF seats, CPU and time per request form with 10,000 pods in another
# namespace, then a checker's requests per second and CPU over idle;
# Markdown for docs/performance.md on stdout.
.PHONY: bench-watchlist
bench-watchlist: controlplane
	$(GO) run ./hack/bench/watchlistcost -bin-dir $(BIN)

# What per-node agents would cost kube-apiserver and etcd
# (hack/bench/agentcost): one process simulating N agents, each watching its
# own Lease by field selector and updating it every 10 s, over 10 HTTP/2
# connections; CPU and anonymous RSS of both from /proc per watcher and per
# event, and the same writes watched by label selector; Markdown on stdout.
# AGENTS: the numbers of agents to run (`make bench` runs BENCH_AGENTS; this
# is for larger runs).
AGENTS ?= 100,500,1000
.PHONY: bench-agents
bench-agents: controlplane
	$(GO) run ./hack/bench/agentcost -bin-dir $(BIN) -agents $(AGENTS)

# What the node agent itself costs a node (hack/bench/agentfoot): the
# watchprobe-agent binary, built by hack/build.sh, run as a pod on a
# real node (containerd, kubelet; root and `make node-packages`) at its
# defaults for AGENT_WINDOW, beside the same agent built without client-go's
# fake clients; peak and end RSS (anonymous, file-backed), CPU, writes,
# package inits and binary size; Markdown on stdout and in out/agentfoot.md.
AGENT_WINDOW ?= 5m
.PHONY: bench-agent-footprint
bench-agent-footprint: controlplane $(BIN)/pause
	$(GO) run ./hack/bench/agentfoot -bin-dir $(BIN) -window $(AGENT_WINDOW) -o out/agentfoot.md

# The fault campaign (cmd/exporter/campaign_test.go) run long: CAMPAIGN_ROUNDS
# faults drawn from CAMPAIGN_SEED (a random seed when unset; printed either
# way, and with the faults so far when a round fails). `make test` runs the
# same test with its small fixed number of rounds, every fault kind once.
CAMPAIGN_ROUNDS ?= 120
CAMPAIGN_SEED   ?=
.PHONY: campaign
campaign: controlplane
	WATCHPROBE_BIN_DIR=$(BIN) WATCHPROBE_CAMPAIGN_ROUNDS=$(CAMPAIGN_ROUNDS) $(if $(CAMPAIGN_SEED),WATCHPROBE_CAMPAIGN_SEED=$(CAMPAIGN_SEED)) \
		$(GO) test -race -count=1 -v -run '^TestCampaign$$' -timeout 60m ./cmd/exporter

# Random config files against the decoder: whatever loads is valid and loads
# back as served. `make test` runs fewer than `make fuzz`; its seeds (the
# testdata files) run in every `go test`, and anything it finds is added to
# them (testdata/fuzz) so that it is checked from then on. The budget is a
# count of runs, not a duration: Go 1.26's fuzz coordinator can report its
# own -fuzztime deadline as a failure of the target (go.dev/issue/75804).
FUZZTIME ?= 300000x
.PHONY: fuzz
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeFile$$' -fuzztime $(FUZZTIME) ./pkg/config

clean:
	rm -rf $(BIN)
