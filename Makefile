# mediaqual: `make test` and `make qualify` set up what they need on a fresh Debian machine.
GO      ?= go
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BIN     := bin

.PHONY: all test qualify build vet deps ffmpeg python3-venv aiperf torch peers venvs chromium bench generate list fuzz gpu-kit gpu-kit-check

all: test

# apt-get install of Debian packages $(1): its hundreds of lines go to a log, printed (the last
# 30) only when it fails.
apt_install = log=$${TMPDIR:-/tmp}/mediaqual-apt-$(firstword $(1)).log; \
	echo "installing Debian $(1) with apt-get (its output: $$log)"; \
	{ $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(1); } >$$log 2>&1 || \
	{ tail -n 30 $$log; exit 1; }

# Debian's ffmpeg provides the encoder mediaserve uses and ffprobe, the suite's oracle.
ffmpeg:
	@if ! command -v ffmpeg >/dev/null || ! command -v ffprobe >/dev/null; then $(call apt_install,ffmpeg); fi

# Debian's python3-venv, which the virtualenvs need (one apt-get, before any starts).
python3-venv:
	@if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then $(call apt_install,python3-venv); fi

# The virtualenvs are built once per machine, in VENV_CACHE under names that change with what
# they hold, and linked into .cache/ where the tests look: another clone (CI's fresh one, for
# one) reuses them instead of installing again (about 6 minutes of CPU, docs/PERFORMANCE.md). A
# .cache/ venv that is a directory of its own is used as it is; MEDIAQUAL_AIPERF_VENV,
# MEDIAQUAL_TORCH_VENV and MEDIAQUAL_PEERS_VENV put each anywhere else.
VENV_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/mediaqual
AIPERF_VERSION := 0.13.0# harness/aiperf.Version (TestMakefilePinsAIPerf)

# The published AIPerf, pinned, in a virtualenv (harness/aiperf.Ensure installs and checks it).
aiperf: python3-venv
ifeq ($(MEDIAQUAL_AIPERF_VENV),)
	@if [ -d .cache/aiperf-$(AIPERF_VERSION) ] && [ ! -L .cache/aiperf-$(AIPERF_VERSION) ]; then \
		$(GO) run ./cmd/aiperfinstall; \
	else \
		mkdir -p .cache && MEDIAQUAL_AIPERF_VENV=$(VENV_CACHE)/aiperf-$(AIPERF_VERSION) $(GO) run ./cmd/aiperfinstall && \
		ln -sfn $(VENV_CACHE)/aiperf-$(AIPERF_VERSION) .cache/aiperf-$(AIPERF_VERSION); \
	fi
else
	$(GO) run ./cmd/aiperfinstall
endif

# torch, diffusers and transformers for the CPU tests of several ranks (gloo) and of every
# adapter on a tiny real pipeline (models/pyworker/pytest finds it), keyed by
# scripts/torch-cpu.txt's digest in VENV_CACHE.
TORCH_VENV ?= $(or $(MEDIAQUAL_TORCH_VENV),.cache/torch-2.11.0)
TORCH_SHARED := $(VENV_CACHE)/torch-2.11.0-$(shell sha256sum scripts/torch-cpu.txt | cut -c1-12)
# Where torch's venv is: TORCH_SHARED unless TORCH_VENV names another place or .cache/torch-2.11.0
# is a directory of its own (absolute: the peers venv's .pth names it).
TORCH_DIR := $(abspath $(shell venv=$(TORCH_VENV); if [ "$$venv" = .cache/torch-2.11.0 ] && [ ! -d $$venv -o -L $$venv ]; then venv=$(TORCH_SHARED); fi; echo $$venv))
torch: python3-venv
	@venv=$(TORCH_DIR); \
	mkdir -p $$(dirname $$venv); \
	flock $$venv.lock sh -c 'if ! $$1/bin/python -c "import torch, torchvision, diffusers, transformers, accelerate, numpy" 2>/dev/null; then \
		echo "installing scripts/torch-cpu.txt into $$1 (CPU torch, diffusers, transformers: about 5 GB, a few minutes)"; \
		python3 -m venv --clear $$1 && $$1/bin/pip install -q --disable-pip-version-check -r scripts/torch-cpu.txt; \
	fi' sh $$venv; \
	if [ "$$venv" = $(TORCH_SHARED) ]; then mkdir -p .cache && ln -sfn $$venv .cache/torch-2.11.0; fi

# The peers' released HTTP layers (sglang 0.5.23, vllm-omni 0.30.0 on vllm 0.30.0) and every package
# their media paths import, installed --no-deps, for the peers' conformance test (harness/peers).
# torch, torchvision and diffusers are the torch venv's, not installed twice: a .pth file puts its
# site-packages after the peers' own, whose pins come first; scripts/peers stands in for the GPU
# kernels and the model. Keyed by scripts/peers/requirements.txt's digest and the torch venv's path
# in VENV_CACHE, linked as .cache/peers (MEDIAQUAL_PEERS_VENV puts it anywhere else). The peers
# need `make torch` too (make venvs builds both, side by side).
PEERS_VENV ?= $(or $(MEDIAQUAL_PEERS_VENV),.cache/peers)
PEERS_SHARED := $(VENV_CACHE)/peers-$(shell { cat scripts/peers/requirements.txt; echo $(TORCH_DIR); } | sha256sum | cut -c1-12)
peers: python3-venv
	@venv=$(PEERS_VENV); \
	if [ "$$venv" = .cache/peers ] && [ ! -d $$venv -o -L $$venv ]; then venv=$(PEERS_SHARED); fi; \
	mkdir -p $$(dirname $$venv); \
	flock $$venv.lock sh -c 'if [ ! -f $$1/.installed ]; then \
		echo "installing scripts/peers/requirements.txt (--no-deps) into $$1"; \
		python3 -m venv --clear $$1 && $$1/bin/pip install -q --disable-pip-version-check --no-deps -r scripts/peers/requirements.txt && \
		$$1/bin/python -c "import sys, sysconfig; print(sysconfig.get_path(\"purelib\", vars={\"base\": sys.argv[1], \"platbase\": sys.argv[1]}))" $$2 \
			>$$($$1/bin/python -c "import sysconfig; print(sysconfig.get_path(\"purelib\"))")/mediaqual-torch.pth && \
		touch $$1/.installed; \
	fi' sh $$venv $(TORCH_DIR); \
	if [ "$$venv" = $(PEERS_SHARED) ]; then mkdir -p .cache && ln -sfn $$venv .cache/peers; fi

# Debian's Chromium renders the HTML report in its test.
chromium:
	@if ! command -v chromium >/dev/null; then $(call apt_install,chromium); fi

deps: ffmpeg aiperf
	$(GO) mod download

# The virtualenvs at once: AIPerf's and torch's each took about 2 minutes alone and about 2
# together on the 2-core development machine (pip unpacks one wheel at a time), 4 one after the
# other; the peers' is the third.
venvs: python3-venv
	@$(MAKE) --no-print-directory -j3 --output-sync=line aiperf torch peers

build:
	$(GO) build -o $(BIN)/mediaserve ./cmd/mediaserve

vet:
	$(GO) vet ./...
	$(GO) vet -tags gpu ./...

# gotestsum prints each package's line as it ends (a failure's output in full), so a long
# run says how far along it is; go test alone prints nothing for minutes. go test starts the
# packages in the order listed, two at once on two cores: ./selftest, the longest (its fault
# children), first, so that the others run beside it instead of after it.
# make fuzz runs beside it at nice 19, on what go test leaves idle (alone it takes about 25 s),
# and its output follows go test's.
test: ffmpeg chromium venvs vet
	$(GO) mod download
	@gotestsum=$$($(GO) tool -n gotestsum) || exit 1; \
	fuzzlog=$$(mktemp); nice -n 19 $(MAKE) --no-print-directory fuzz >$$fuzzlog 2>&1 & fuzz=$$!; \
	echo "go test -count=1 -timeout 25m ./selftest ./... (one line a package as it ends), make fuzz beside it"; \
	$$gotestsum --format pkgname -- -count=1 -timeout 25m ./selftest ./...; rc=$$?; \
	wait $$fuzz; frc=$$?; echo "make fuzz (exit $$frc):"; cat $$fuzzlog; rm -f $$fuzzlog; \
	[ $$rc = 0 ] && [ $$frc = 0 ]

# Each fuzz target runs briefly on every test run (its seeds also run as plain tests); found
# crashers land in testdata/fuzz and stay as regression inputs.
# Execution counts, not durations: a -fuzztime duration races Go 1.26's fuzz coordinator, which
# then fails the target with "context deadline exceeded" and no crasher (go.dev/issue/75804,
# fixed in Go 1.27). Each count took 3-7 s on an idle 2-core machine (`time make fuzz`: 17 s
# before FuzzReference, whose count took 5.0 s with other tests running beside it).
FUZZ_MP4 ?= 40000x
FUZZ_FORM ?= 25000x
FUZZ_RESOLVE ?= 50000x
FUZZ_REFERENCE ?= 40000x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzReadMP4$$' -fuzztime $(FUZZ_MP4) -fuzzminimizetime 200x ./harness/media/
	$(GO) test -run '^$$' -fuzz '^FuzzReadForm$$' -fuzztime $(FUZZ_FORM) -fuzzminimizetime 200x ./server/
	$(GO) test -run '^$$' -fuzz '^FuzzResolve$$' -fuzztime $(FUZZ_RESOLVE) -fuzzminimizetime 200x ./server/
	$(GO) test -run '^$$' -fuzz '^FuzzReference$$' -fuzztime $(FUZZ_REFERENCE) -fuzzminimizetime 200x ./server/

# The main job: qualify every checkpoint this machine can run (the embedded reference
# families on a CPU) and write JUnit, JSON, Markdown and HTML results. The root package holds
# the rows and nothing else (the suite's self-tests are selftest/'s, run by make test), so the
# JUnit holds the rows alone.
# The test binary writes the report into a directory beside $(REPORT_DIR) and then puts it in
# place of $(REPORT_DIR) whole (an interrupted run's report too, marked so, on SIGINT), so the
# paths the report names are those it has after the run, and Ctrl-C never leaves a mix of two
# runs. gotestsum's junit.xml joins it only when the run replaced the directory (a directory
# of another inode); a run that wrote no report leaves the previous one whole, its junit.xml
# included. The last line says which happened. QUALIFY_RUN narrows the run to the cases it
# matches (go test -run), e.g. make qualify QUALIFY_RUN=Ref_edit.
# gotestsum runs as itself, not under `go tool`, which forwards every signal to it: Ctrl-C then
# reached it twice, its handler takes one, and the second killed it and, through a broken pipe,
# the test binary before it wrote the interrupted run's report (selftest's
# TestMakeQualifyInterrupted: 1 run in 4 on a loaded machine).
REPORT_DIR ?= reports/out
QUALIFY_RUN ?=
qualify: deps
	@out=$(REPORT_DIR); junit=$$(dirname $$out)/.$$(basename $$out).junit.xml; \
	mkdir -p $$(dirname $$out); rm -f $$junit; before=$$(stat -c %i $$out 2>/dev/null); \
	interrupted=; trap 'interrupted=1' INT TERM; \
	gotestsum=$$($(GO) tool -n gotestsum) || exit 1; \
	status=0; MEDIAQUAL_REPORT_DIR=$(abspath $(REPORT_DIR)) $$gotestsum --format testname \
		--junitfile $$junit -- -count=1 -timeout 30m -run '$(QUALIFY_RUN)' . || status=$$?; \
	echo; \
	after=$$(stat -c %i $$out 2>/dev/null); \
	if [ -n "$$after" ] && [ "$$after" != "$$before" ] && [ -f $$out/results.json ]; then \
		mv $$junit $$out/junit.xml; \
		if grep -q '"interrupted":' $$out/results.json; then \
			echo "results of an INTERRUPTED run (partial, marked so): $$out/index.html  $$out/results.md  $$out/results.json  $$out/junit.xml"; \
		else echo "results: $$out/index.html  $$out/results.md  $$out/results.json  $$out/junit.xml"; fi; \
	else \
		rm -f $$junit; echo "no results: the run ended before writing a report; $$out is the previous run's, unchanged"; \
	fi; \
	if [ -n "$$interrupted" ] && [ $$status = 0 ]; then status=130; fi; \
	exit $$status

generate:
	$(GO) generate .

# The dry run: every generated case, its stage subtests and the command that runs it.
list:
	@$(GO) run ./cmd/casegen -list

# The offline kit for the lent GPU machines, in .gpu/ (docs/DEVICE-KIT.md): wheels
# and ffmpeg are downloaded once, mediaserve and the gpu-tagged suite binary rebuilt every time.
gpu-kit:
	GO=$(GO) bash scripts/gpu-kit/build.sh

# The kit leaves out scripts/gpu-kit/unused.txt: this runs `make qualify` with every module those
# distributions hold blocked, and fails if AIPerf or anything else tried to import one.
gpu-kit-check: gpu-kit
	@rm -rf .cache/gpu-kit/block
	python3 scripts/gpu-kit/wheels.py blocker .cache/gpu-kit/whl .cache/gpu-kit/block
	@status=0; PYTHONPATH=$(abspath .cache/gpu-kit/block) $(MAKE) qualify || status=$$?; \
	if [ -s .cache/gpu-kit/block/attempts.log ]; then \
		echo "gpu-kit-check: FAIL: imports of modules the kit leaves out:"; sort -u -k2 .cache/gpu-kit/block/attempts.log; exit 1; \
	fi; echo "gpu-kit-check: no module the kit leaves out was imported"; exit $$status

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 200x ./server/
