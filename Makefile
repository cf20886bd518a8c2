# watchprobe: `make demo` to see it run, `make test` to check it.

GO      ?= go
BIN     := $(CURDIR)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)

CONTROLPLANE := hack/tools/controlplane
HELM_TOOLS   := hack/tools/helm
PROM_TOOLS   := hack/tools/prometheus
LINT_TOOLS   := hack/tools/staticcheck
# Debian's package: Alertmanager does not build from the module proxy (its UI
# assets are not in the module).
ALERTMANAGER ?= /usr/bin/prometheus-alertmanager

.PHONY: all bench build controlplane dashboards demo test vet lint fmt-check clean

all: build

# hack/build.sh is also what the Dockerfile runs.
build:
	hack/build.sh $(BIN)/watchprobe $(VERSION) $(REVISION)

# kube-apiserver and etcd, pinned in $(CONTROLPLANE)/go.mod. Rebuilt only when
# that pin changes; Go's build cache makes a rebuild take seconds.
controlplane: $(BIN)/kube-apiserver $(BIN)/etcd

$(BIN)/kube-apiserver: $(CONTROLPLANE)/go.mod $(CONTROLPLANE)/go.sum
	@echo ">> building kube-apiserver v1.37.2 from the Go module proxy."
	@echo "   The first build takes about 8 minutes on 2 cores; later ones are cached."
	cd $(CONTROLPLANE) && $(GO) build -o $@ k8s.io/kubernetes/cmd/kube-apiserver

$(BIN)/etcd: $(CONTROLPLANE)/go.mod $(CONTROLPLANE)/go.sum
	@echo ">> building etcd v3.7.0 from the Go module proxy"
	cd $(CONTROLPLANE) && $(GO) build -o $@ go.etcd.io/etcd/server/v3

$(BIN)/helm: $(HELM_TOOLS)/go.mod $(HELM_TOOLS)/go.sum
	@echo ">> building helm v3.22.0 from the Go module proxy (about 2 minutes the first time)"
	cd $(HELM_TOOLS) && $(GO) build -o $@ helm.sh/helm/v3/cmd/helm

# promtool checks the rules; prometheus runs them in the end-to-end test.
$(BIN)/promtool: $(PROM_TOOLS)/go.mod $(PROM_TOOLS)/go.sum
	@echo ">> building Prometheus and promtool v0.316.0 from the Go module proxy (about 5 minutes the first time)"
	cd $(PROM_TOOLS) && $(GO) build -o $(BIN)/ github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool

$(BIN)/staticcheck: $(LINT_TOOLS)/go.mod $(LINT_TOOLS)/go.sum
	cd $(LINT_TOOLS) && $(GO) build -o $@ honnef.co/go/tools/cmd/staticcheck

$(ALERTMANAGER):
	@echo ">> installing Debian's prometheus-alertmanager (apt-get, as root)"
	@[ "$$(id -u)" = 0 ] || { echo "installing Alertmanager needs root: sudo apt-get install prometheus-alertmanager, or set ALERTMANAGER"; exit 1; }
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus-alertmanager

# The chart cannot read files outside itself, so it ships copies, which a
# test keeps equal to these sources.
dashboards:
	$(GO) run ./dashboards -o dashboards/watchprobe.json
	cp dashboards/watchprobe.json rules/watchprobe.rules.yml charts/watchprobe/files/

demo: build controlplane
	$(GO) build -o $(BIN)/demo ./hack/demo
	$(BIN)/demo --bin-dir $(BIN)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

lint: $(BIN)/staticcheck
	$(BIN)/staticcheck ./...

# Unit tests and tests against the real control plane; -race because the
# probe's paths, sweeper and writer share state.
test: fmt-check vet lint controlplane $(BIN)/helm $(BIN)/promtool $(ALERTMANAGER)
	WATCHPROBE_BIN_DIR=$(BIN) WATCHPROBE_ALERTMANAGER=$(ALERTMANAGER) $(GO) test -race -count=1 -timeout 20m ./...

# Performance figures, never pass/fail: the hot path's Go benchmarks, then the
# exporter against bare reference clients and its cost as load grows, on the
# real control plane. Writes out/bench.json.
bench: build controlplane
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/probe
	$(GO) run ./hack/bench -bin-dir $(BIN) -o out/bench.json

clean:
	rm -rf $(BIN)
