# mediaqual: `make test` and `make qualify` set up what they need on a fresh Debian machine.
GO      ?= go
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BIN     := bin

.PHONY: all test qualify build vet deps ffmpeg aiperf bench generate

all: test

# Debian's ffmpeg provides the encoder mediaserve uses and ffprobe, the suite's oracle.
ffmpeg:
	@if ! command -v ffmpeg >/dev/null || ! command -v ffprobe >/dev/null; then \
		echo "installing Debian ffmpeg"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ffmpeg; \
	fi

# The published AIPerf, pinned, in a virtualenv under .cache (MEDIAQUAL_AIPERF_VENV overrides).
aiperf:
	@python3 -c 'import venv, ensurepip' 2>/dev/null || { echo "installing Debian python3-venv"; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; }
	$(GO) run ./internal/aiperfinstall

deps: ffmpeg aiperf
	$(GO) mod download

build:
	$(GO) build -o $(BIN)/mediaserve ./cmd/mediaserve

vet:
	$(GO) vet ./...
	$(GO) vet -tags gpu ./...

test: deps vet
	$(GO) test -count=1 ./...

# The main job: qualify every checkpoint this machine can run (the embedded reference
# families on a CPU) and write JUnit, JSON and Markdown results.
REPORT_DIR ?= reports/out
qualify: deps
	@mkdir -p $(REPORT_DIR)
	@status=0; MEDIAQUAL_REPORT_DIR=$(abspath $(REPORT_DIR)) $(GO) tool gotestsum --format testname \
		--junitfile $(REPORT_DIR)/junit.xml -- -count=1 -timeout 30m . || status=$$?; \
	echo; echo "results: $(REPORT_DIR)/results.md  $(REPORT_DIR)/results.json  $(REPORT_DIR)/junit.xml"; \
	exit $$status

generate:
	$(GO) generate .

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 200x ./server/
