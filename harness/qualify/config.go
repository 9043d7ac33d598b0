package qualify

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models/spec"
)

// Config is everything a qualification reads from its environment, read once (FromEnv) and
// passed in code by anyone who runs the suite from their own tests. The bundle root
// (MEDIAQUAL_BUNDLES) and load timeout (MEDIAQUAL_LOAD_TIMEOUT) are read by models/bundle,
// which the server shares.
type Config struct {
	// Mediaserve is the mediaserve binary: the target when no endpoint is given, and its
	// `mediaserve task` is the native path. Empty: no native path here (identity is then
	// "not compared" unless the bundle carries reference outputs). Build it with
	// `go build -o mediaserve github.com/mediaqual/mediaqual/cmd/mediaserve`.
	Mediaserve string
	// Root is mediaqual's module root: a row's goldens, a worker's script, reports/published
	// and the AIPerf virtualenv are found under it. From another module that is not ".": it is
	// the directory `go list -m -f '{{.Dir}}' github.com/mediaqual/mediaqual` prints. A Root
	// that lacks the files a row names is refused before the row runs (RootHolds).
	Root string
	// Lookup finds inventory rows by id, for /v1/models reconciliation; nil knows only the row
	// being qualified.
	Lookup func(id string) (spec.Entry, error)

	Target Target

	GPUs      string      // MEDIAQUAL_GPUS: CUDA device ids for a launched mediaserve
	ReportDir string      // MEDIAQUAL_REPORT_DIR: case files and pictures are kept there; "" keeps nothing
	Engine    string      // MEDIAQUAL_ENGINE: mediaserve's -engine, for the server and `mediaserve task`
	Layout    spec.Layout // MEDIAQUAL_LAYOUT: mediaserve's -layout, for a row that offers layouts ("": its first that fits)
	Fault     string      // MEDIAQUAL_FAULT: a launched mediaserve's -fault (the fault self-test)

	// RequestTimeout is the deadline of each request to the server under test (every HTTP
	// exchange, each AIPerf request, following an unfinished job); 0: derived from the row
	// (RequestDeadline). MEDIAQUAL_REQUEST_TIMEOUT.
	RequestTimeout time.Duration
	// CaseTimeout is the deadline of the whole case; 0: derived from the row (CaseDeadline).
	// MEDIAQUAL_CASE_TIMEOUT.
	CaseTimeout time.Duration
	Concurrency int // MEDIAQUAL_CONCURRENCY: AIPerf's concurrency
	// Warmup and Measured ask for a quick run (MEDIAQUAL_WARMUP_REQUESTS,
	// MEDIAQUAL_MEASURED_REQUESTS); negative: the pinned counts.
	Warmup, Measured int

	UpdateGoldens         bool // MEDIAQUAL_UPDATE_GOLDENS=1
	WriteReferenceOutputs bool // MEDIAQUAL_WRITE_REFERENCE_OUTPUTS=1
}

// Target is the server under test: mediaserve launched by the suite (the zero Target), or an
// endpoint that is already running.
type Target struct {
	Endpoint string       // MEDIAQUAL_ENDPOINT, e.g. http://host:8000
	APIKey   string       // MEDIAQUAL_API_KEY, sent as a bearer token
	Profile  wire.Profile // how the endpoint speaks (MEDIAQUAL_WIRE: mediaserve, sglang, vllm-omni)
}

// External says whether the target is an endpoint the suite did not start.
func (t Target) External() bool { return t.Endpoint != "" }

// Environment variables the suite reads, besides models/bundle's.
const (
	EnvEndpoint = "MEDIAQUAL_ENDPOINT"
	EnvAPIKey   = "MEDIAQUAL_API_KEY"
	EnvWire     = "MEDIAQUAL_WIRE"
	EnvFault    = "MEDIAQUAL_FAULT"
	EnvLayout   = "MEDIAQUAL_LAYOUT"
	// EnvRequestTimeout and EnvCaseTimeout override the derived deadlines (Go durations).
	EnvRequestTimeout = "MEDIAQUAL_REQUEST_TIMEOUT"
	EnvCaseTimeout    = "MEDIAQUAL_CASE_TIMEOUT"
	// EnvWriteReferenceOutputs, set to 1, makes the correctness stage write its native outputs
	// as the bundle's reference outputs where it has none.
	EnvWriteReferenceOutputs = "MEDIAQUAL_WRITE_REFERENCE_OUTPUTS"
)

// Defaults is the configuration with nothing set: launch mediaserve, pinned request counts,
// one request at a time, deadlines derived from the row.
func Defaults() Config {
	return Config{Target: Target{Profile: wire.Mediaserve}, Concurrency: 1, Warmup: -1, Measured: -1}
}

// FromEnv reads the configuration from the environment; root is the module root and
// mediaserve the binary to launch (MEDIAQUAL_MEDIASERVE, when set, names a prebuilt one).
func FromEnv(root, mediaserve string) (Config, error) {
	c := Defaults()
	c.Root, c.Mediaserve = root, mediaserve
	if m := os.Getenv("MEDIAQUAL_MEDIASERVE"); m != "" {
		abs, err := filepath.Abs(m)
		if err != nil {
			return c, err
		}
		c.Mediaserve = abs
	}
	c.GPUs, c.ReportDir = os.Getenv("MEDIAQUAL_GPUS"), os.Getenv("MEDIAQUAL_REPORT_DIR")
	c.Engine, c.Fault = os.Getenv("MEDIAQUAL_ENGINE"), os.Getenv(EnvFault)
	if l := spec.Layout(os.Getenv(EnvLayout)); l != "" {
		if err := l.Validate(); err != nil {
			return c, fmt.Errorf("%s: %w", EnvLayout, err)
		}
		c.Layout = l
	}
	c.UpdateGoldens = os.Getenv("MEDIAQUAL_UPDATE_GOLDENS") == "1"
	c.WriteReferenceOutputs = os.Getenv(EnvWriteReferenceOutputs) == "1"
	c.Target.Endpoint, c.Target.APIKey = os.Getenv(EnvEndpoint), os.Getenv(EnvAPIKey)
	if name := os.Getenv(EnvWire); name != "" {
		p, err := wire.ByName(name)
		if err != nil {
			return c, fmt.Errorf("%s: %w", EnvWire, err)
		}
		c.Target.Profile = p
	}
	for _, v := range []struct {
		env string
		d   *time.Duration
	}{{EnvRequestTimeout, &c.RequestTimeout}, {EnvCaseTimeout, &c.CaseTimeout}} {
		if s := os.Getenv(v.env); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return c, fmt.Errorf("%s=%q: want a positive Go duration, e.g. 90s or 30m", v.env, s)
			}
			*v.d = d
		}
	}
	for _, v := range []struct {
		env string
		n   *int
		min int
	}{{"MEDIAQUAL_WARMUP_REQUESTS", &c.Warmup, 0}, {"MEDIAQUAL_MEASURED_REQUESTS", &c.Measured, 1}, {"MEDIAQUAL_CONCURRENCY", &c.Concurrency, 1}} {
		if s := os.Getenv(v.env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < v.min {
				return c, fmt.Errorf("%s=%q: want an integer of at least %d", v.env, s, v.min)
			}
			*v.n = n
		}
	}
	return c, nil
}

// pinnedWarmup is the pinned AIPerf warmup: one request; the pinned measured run is one
// request per pinned input.
const pinnedWarmup = 1

// plan is how many warmup and measured requests this run sends: the pinned counts unless the
// configuration asks for a quick run (fewer measured requests cycle through the first inputs).
func (c Config) plan(inputs int) (warmup, measured int) {
	warmup, measured = pinnedWarmup, inputs
	if c.Warmup >= 0 {
		warmup = c.Warmup
	}
	if c.Measured > 0 {
		measured = c.Measured
	}
	return warmup, measured
}

// RootHolds refuses a Root without the files e names relative to mediaqual's module root: its
// goldens (unless they are being written) and, for a launched mediaserve, its worker's
// script. Without it such a row failed deep inside a stage ("open models/reference/...").
func (c Config) RootHolds(e spec.Entry) error {
	var need []string
	if e.Goldens != "" && !c.UpdateGoldens {
		need = append(need, e.Goldens)
	}
	if c.Mediaserve != "" && !c.Target.External() {
		for _, a := range e.Worker {
			if strings.HasSuffix(a, ".py") {
				need = append(need, a)
			}
		}
	}
	for _, p := range need {
		if filepath.IsAbs(p) {
			continue
		}
		if _, err := os.Stat(filepath.Join(c.Root, p)); err != nil {
			return fmt.Errorf("Config.Root (%q) is not mediaqual's module root: %s has no %s, which %s names; "+
				"set Root to the directory `go list -m -f '{{.Dir}}' github.com/mediaqual/mediaqual` prints, "+
				"or clear the row's Goldens if it is a row of your own", c.Root, c.Root, p, e.ID)
		}
	}
	return nil
}
