// Package reports turns qualification results into files people and CI read: results.json,
// results.md (result rows plus the inventory table), index.html (the same with pictures:
// contact sheets, edit strips, latency charts) and, through gotestsum, junit.xml. It
// knows the shape of a result, not what any model is.
package reports

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

// Outcomes of a row.
const (
	Passed   = "passed"
	Failed   = "failed"
	Excluded = "excluded"
	NotRun   = "not run"
	// Interrupted: the run was interrupted (SIGINT) while this row's stages ran; its stages
	// say which finished, which stopped and which never ran.
	Interrupted = "interrupted"
	// GapDetected: every stage passed and the probe found the capability gap the inventory
	// expects of this negative control.
	GapDetected = "capability gap detected (expected)"
)

// Stage is one subtest's result.
type Stage struct {
	Name    string `json:"name"`
	Passed  bool   `json:"passed"`
	Message string `json:"message,omitempty"` // first failure, or what was established
	// Check names the check that failed the stage, when its failure is a typed one
	// (harness/check.Failure); tests read it instead of the message.
	Check string `json:"check,omitempty"`
	// Checks are all the checks that failed it, Check first (a stage may fail several).
	Checks []string `json:"checks,omitempty"`
	// NotRun says the stage did not run (no native path here, the run interrupted): it
	// neither passed nor failed, and Message says why.
	NotRun bool `json:"not_run,omitempty"`
}

// Mark is how a stage reads in a report: ok, FAIL or not run.
func (s Stage) Mark() string {
	switch {
	case s.NotRun:
		return "not run"
	case s.Passed:
		return "ok"
	}
	return "FAIL"
}

// Timing holds figures over measured requests only (no warmup, load or start-up).
type Timing struct {
	Requests        int     `json:"requests"`
	ClientP50MS     float64 `json:"client_p50_ms"`
	ClientP95MS     float64 `json:"client_p95_ms"`
	ClientMaxMS     float64 `json:"client_max_ms"`
	TaskP50MS       float64 `json:"task_p50_ms"`
	TaskP95MS       float64 `json:"task_p95_ms"`
	OverheadP50MS   float64 `json:"overhead_p50_ms"` // client end-to-end − Task-call wall
	PollIntervalMS  float64 `json:"poll_interval_ms,omitempty"`
	PollHoldMS      float64 `json:"poll_hold_ms,omitempty"` // the server held each poll until a change, at most this long
	ItemsPerSecond  float64 `json:"items_per_s"`            // clips/s or images/s
	FramesPerSecond float64 `json:"frames_per_s,omitempty"`
	PeakMemoryMB    float64 `json:"peak_memory_mb"`
	Source          string  `json:"source"`                // where client latency came from
	Concurrency     int     `json:"concurrency,omitempty"` // AIPerf's concurrency
	// Parts is where a request's client latency went: the p50 of each part over the measured
	// requests, in order (queue, the Task's phases, hand-over, encode, the server's rest, the
	// client's share: polling, HTTP, transfer). Their sum is close to, not exactly, the
	// client p50 (medians do not add).
	Parts []TimePart `json:"parts,omitempty"`
	// Task speed: the family's count of denoising FLOPs per step at the pinned settings, the
	// measured denoise time per step (p50) and what that achieves.
	DenoiseTFLOPPerStep float64 `json:"denoise_tflop_per_step,omitempty"`
	DenoiseMSPerStep    float64 `json:"denoise_ms_per_step,omitempty"`
	AchievedTFLOPS      float64 `json:"achieved_tflops,omitempty"`
	// Encode quality: mean PSNR (dB, over RGB) of each served artifact's decoded frames against
	// the raw frames it was encoded from, worst and mean over the measured requests.
	EncodePSNRMinDB  float64 `json:"encode_psnr_min_db,omitempty"`
	EncodePSNRMeanDB float64 `json:"encode_psnr_mean_db,omitempty"`
}

// TimePart is one named part of a request's time.
type TimePart struct {
	Name string  `json:"name"`
	MS   float64 `json:"ms"`
}

// Row is one checkpoint's result.
type Row struct {
	Checkpoint string          `json:"checkpoint"`
	Family     string          `json:"family"`
	Workload   spec.Capability `json:"workload"`
	Profile    string          `json:"profile"`
	Label      string          `json:"label"` // what this row may be called: never more than was run
	Revision   string          `json:"revision"`
	Precision  string          `json:"precision"`
	// Engine is how the Task ran the model (eager, regional-compile): bytes are only
	// comparable between runs of one engine.
	Engine   string            `json:"engine,omitempty"`
	Status   spec.Status       `json:"inventory_status"`
	Note     string            `json:"note,omitempty"`
	Outcome  string            `json:"outcome"`
	Gap      string            `json:"capability_gap,omitempty"`
	Stages   []Stage           `json:"stages"`
	Settings *spec.Settings    `json:"settings,omitempty"`
	Bundle   map[string]string `json:"bundle,omitempty"`  // what was served: path and digest
	Dataset  map[string]string `json:"dataset,omitempty"` // fixture file -> sha256
	Endpoint string            `json:"endpoint,omitempty"`
	Mode     string            `json:"mode,omitempty"`
	// Layout is how the server ran the model: its GPU layout (cfg-2, ulysses-N, ...), its
	// lanes and each one's devices, as /v1/models declared them, e.g. "cfg-2, 1 lane, CUDA
	// devices 0,1". Bytes are only comparable between runs of one layout.
	Layout string `json:"layout,omitempty"`
	// Parity is how the served runtime (engine and layout) compared with eager on one device
	// at load (spec.Parity); nil where the server checks none.
	Parity   *spec.Parity      `json:"parity,omitempty"`
	Versions map[string]string `json:"versions,omitempty"`
	Hardware string            `json:"hardware,omitempty"`
	Counts   map[string]int    `json:"counts,omitempty"`
	Timing   *Timing           `json:"timing,omitempty"`
	Command  string            `json:"command"`
	// AIPerfCommand is the exact AIPerf profile the aiperf stage ran.
	AIPerfCommand string    `json:"aiperf_command,omitempty"`
	Started       time.Time `json:"started"`
	Duration      string    `json:"duration"`
	// Pictures are images written under the report directory for this row.
	Pictures []Picture `json:"pictures,omitempty"`
	// Load is how long the served weights took to load, against the timeout that applied.
	Load *Load `json:"load,omitempty"`
	// ReferenceSSIM is the mean SSIM measured against each reference output, per input.
	ReferenceSSIM map[string]float64 `json:"reference_ssim,omitempty"`
	// Limits are what keeps this run's evidence below the top of the ladder; Earned is the rung
	// it supports (set by Earn), empty for a failed run or a row that is not a model.
	Limits []Limit     `json:"limits,omitempty"`
	Earned spec.Status `json:"earned,omitempty"`
	// Findings are the server's departures from the contract (harness/wire), each "name: detail".
	Findings []string `json:"findings,omitempty"`
}

// Load is a served model's load: from start to ready, and the timeout it ran under.
type Load struct {
	ReadyS   float64 `json:"ready_s"`
	TimeoutS float64 `json:"timeout_s"`
	From     string  `json:"timeout_from"` // where the timeout came from
}

// Limit caps what a run can earn: the highest rung it allows, and why.
type Limit struct {
	Ceiling spec.Status `json:"ceiling"`
	Why     string      `json:"why"`
}

// Earn sets the rung a finished row's evidence supports: a passed model run earns
// aiperf-qualified unless a limit holds it lower; a failed run, and anything that is not a
// model (reference families), earns nothing.
func (r *Row) Earn() {
	r.Earned = ""
	if r.Outcome != Passed || strings.HasPrefix(r.Profile, "reference") {
		return
	}
	r.Earned = spec.AIPerfQualified
	for _, l := range r.Limits {
		if l.Ceiling.Rank() < r.Earned.Rank() {
			r.Earned = l.Ceiling
		}
	}
}

// Published reads the rows of every published run (dir/*/results.json). A run whose
// results.json cannot be read or parsed is skipped, and named in skipped with its error, so
// that one malformed folder costs only its own rows, never another's; err is for dir itself.
func Published(dir string) (rows []Row, from []string, skipped []string, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*", "results.json"))
	if err != nil {
		return nil, nil, nil, err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		var rep Report
		if err := json.Unmarshal(b, &rep); err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		for _, r := range rep.Rows {
			rows = append(rows, r)
			from = append(from, f)
		}
	}
	return rows, from, skipped, nil
}

// Label says what a row may be presented as, from its profile.
func Label(profile string) string {
	switch {
	case strings.HasPrefix(profile, "reference"):
		return "reference/L0 machinery check, not a model qualification"
	case strings.Contains(profile, "L0-random"):
		return "L0-random weights: mechanics and timing only, not quality"
	case profile == "full":
		return "model"
	}
	return profile
}

// Report is a whole run.
type Report struct {
	Generated time.Time `json:"generated"`
	Command   string    `json:"command"`
	// Interrupted says why the run did not finish ("interrupt signal"), "" for a run that
	// did: its rows are then those that passed or failed before it, the one it stopped
	// (outcome Interrupted) and those it never started (NotRun).
	Interrupted string       `json:"interrupted,omitempty"`
	Rows        []Row        `json:"rows"`
	Inventory   []spec.Entry `json:"inventory"`
}

// SortRows orders a report's rows: those that ran first (any outcome but not run or
// excluded), then the rest, each by checkpoint.
func SortRows(rows []Row) {
	ran := func(r Row) bool { return r.Outcome != NotRun && r.Outcome != Excluded }
	sort.SliceStable(rows, func(i, j int) bool {
		if a, b := ran(rows[i]), ran(rows[j]); a != b {
			return a
		}
		return rows[i].Checkpoint < rows[j].Checkpoint
	})
}

// WriteFiles writes results.json, results.md and index.html (WriteHTML) into dir and returns
// their paths. A picture with a Source is copied to its Path under dir first; one without must
// already be there. A report without a Generated time is stamped now.
func WriteFiles(dir string, r Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, row := range r.Rows {
		for _, p := range row.Pictures {
			if p.Source == "" {
				continue
			}
			if !filepath.IsLocal(filepath.FromSlash(p.Path)) {
				return nil, fmt.Errorf("picture path %q is not inside the report directory", p.Path)
			}
			if err := copyFile(p.Source, filepath.Join(dir, filepath.FromSlash(p.Path))); err != nil {
				return nil, fmt.Errorf("picture %s: %w", p.Title, err)
			}
		}
	}
	if r.Generated.IsZero() {
		r.Generated = time.Now()
	}
	SortRows(r.Rows)
	js := filepath.Join(dir, "results.json")
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(js, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	md := filepath.Join(dir, "results.md")
	f, err := os.Create(md)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := Markdown(f, r); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	html, err := WriteHTML(dir, r)
	if err != nil {
		return nil, err
	}
	return []string{js, md, html}, nil
}

// provenance is when the report was generated (RFC 3339, UTC) and by which command, each ""
// when the report does not say (a Report built by hand).
func provenance(r Report) (when, command string) {
	if !r.Generated.IsZero() {
		when = r.Generated.UTC().Format(time.RFC3339)
	}
	return when, r.Command
}

// InterruptedBanner is what results.md and index.html say above the rows of an interrupted run.
func InterruptedBanner(why string) string {
	return "INTERRUPTED (" + why + "): this run did not finish. Rows outcome " + Interrupted +
		" stopped part way (their stages say where); rows " + NotRun + " never started. Nothing here is a complete qualification."
}

// Markdown renders the result rows, each row's details, and the inventory table.
func Markdown(w io.Writer, r Report) error {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# mediaqual results\n\n")
	if when, cmd := provenance(r); when != "" || cmd != "" {
		p("Generated")
		if when != "" {
			p(" %s", when)
		}
		if cmd != "" {
			p(" by `%s`", cmd)
		}
		p(".\n\n")
	}
	if r.Interrupted != "" {
		p("**%s**\n\n", InterruptedBanner(r.Interrupted))
	}
	p("| %s |\n|%s\n", strings.Join(summaryColumns, " | "), strings.Repeat("---|", len(summaryColumns)))
	for _, row := range r.Rows {
		p("| %s |\n", strings.Join(summaryCells(row), " | "))
	}
	for _, row := range r.Rows {
		p("\n## %s\n\n", row.Checkpoint)
		p("- label: %s\n- outcome: %s; inventory status: %s\n", row.Label, row.Outcome, row.Status)
		for _, d := range details(row) {
			switch {
			case d.Code:
				p("- %s: `%s`\n", d.Name, d.Text)
			case d.Stage:
				p("- %s: %s\n", d.Name, firstLine(d.Text))
			default:
				p("- %s: %s\n", d.Name, d.Text)
			}
		}
	}
	p("\n## Inventory\n\n")
	InventoryTable(w, r.Inventory)
	return nil
}

// InventoryTable renders every inventory row, whatever its state.
func InventoryTable(w io.Writer, inv []spec.Entry) {
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(inventoryColumns, " | "), strings.Repeat("---|", len(inventoryColumns)))
	for _, r := range inventoryRows(inv) {
		if !r.Variant {
			fmt.Fprintf(w, "| %s |\n", strings.Join(r.Cells, " | "))
			continue
		}
		line := "|" // a variant's empty cells as "| |"
		for _, c := range r.Cells {
			if c != "" {
				line += " " + c
			}
			line += " |"
		}
		fmt.Fprintln(w, line)
	}
}

func throughput(w spec.Capability, t *Timing) string {
	if w == spec.TextToVideo {
		return fmt.Sprintf("%.3f clips/s, %.2f frames/s", t.ItemsPerSecond, t.FramesPerSecond)
	}
	return fmt.Sprintf("%.3f images/s", t.ItemsPerSecond)
}

func joinMap(m map[string]string) string {
	return joinSorted(m, "; ", func(v string) string { return v })
}

// joinSorted renders m as "key value" pairs in key order, sep between them.
func joinSorted[V any](m map[string]V, sep string, value func(V) string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + value(m[k])
	}
	return strings.Join(parts, sep)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
