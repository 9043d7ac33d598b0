// The qualification suite. Every inventory row gets a generated top-level test (cases_*.go,
// written by `go generate`) that calls qualify; each runs the qualification stages as
// subtests with stable names and records a result row. TestMain builds mediaserve once and,
// when MEDIAQUAL_REPORT_DIR is set, writes the report after every case has run.
// docs/QUALIFICATION.md describes the stages.
package mediaqual_test

//go:generate go run ./internal/casegen/gen

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"mediaqual/internal/casegen"
	"mediaqual/internal/stages"
	"mediaqual/models"
	"mediaqual/models/bundle"
	"mediaqual/models/spec"
	"mediaqual/reports"
)

var (
	mediaserveBin string // built by TestMain
	rowsMu        sync.Mutex
	rows          []reports.Row
)

func TestMain(m *testing.M) {
	flag.Parse()
	// A GPU host may have no Go toolchain: MEDIAQUAL_MEDIASERVE names a prebuilt binary.
	dir, err := os.MkdirTemp("", "mediaqual-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if mediaserveBin = os.Getenv("MEDIAQUAL_MEDIASERVE"); mediaserveBin == "" {
		mediaserveBin = filepath.Join(dir, "mediaserve")
		build := exec.Command("go", "build", "-o", mediaserveBin, "./cmd/mediaserve")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building mediaserve: %v\n%s", err, out)
			os.Exit(1)
		}
	} else if mediaserveBin, err = filepath.Abs(mediaserveBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if out := os.Getenv("MEDIAQUAL_REPORT_DIR"); out != "" && len(rows) > 0 {
		paths, err := reports.WriteFiles(out, reports.Report{
			Generated: time.Now(), Command: strings.Join(os.Args, " "), Rows: rows, Inventory: models.Inventory(),
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "writing reports:", err)
			code = 1
		}
		for _, p := range paths {
			fmt.Println("report:", p)
		}
	}
	os.Exit(code)
}

// needsGPUTag is what a GPU checkpoint's test does in a build without -tags gpu.
// The row is still reported, as not run: nothing is counted as a pass.
func needsGPUTag(t *testing.T, id string) {
	e, err := models.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	row := newRow(e)
	row.Outcome = reports.NotRun
	row.Note = "needs -tags gpu and a GPU host; " + e.Note
	record(row)
	t.Skipf("%s runs on a GPU host: %s", id, casegen.Command(e))
}

func record(row reports.Row) {
	rowsMu.Lock()
	defer rowsMu.Unlock()
	rows = append(rows, row)
}

// TestGeneratedCasesAreCurrent fails when the inventory changed without `go generate`.
func TestGeneratedCasesAreCurrent(t *testing.T) {
	files, err := casegen.Files()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(name)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale against the inventory: run go generate .", name)
		}
	}
}

// qualification is one checkpoint's run: the row being filled and what stages hand on.
type qualification struct {
	t     *testing.T
	entry spec.Entry
	row   *reports.Row
	ctx   context.Context
	dir   string // this case's kept files: logs, artifacts, native outputs

	native map[string]nativeResult // fixture key -> native path result
	server *servedModel
	served []servedRequest // the AIPerf run's requests
	pollMS float64
	commit string // the revision the bundle states, once the inventory stage has read it
}

func qualify(t *testing.T, id string) {
	e, err := models.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	q := &qualification{t: t, entry: e, ctx: context.Background(), native: map[string]nativeResult{}}
	row := newRow(e)
	q.row = &row
	defer func() {
		q.row.Duration = time.Since(start).Round(time.Millisecond).String()
		switch {
		case t.Failed():
			q.row.Outcome = reports.Failed
		case q.row.Gap != "":
			q.row.Outcome = reports.GapDetected
		}
		q.row.Earn()
		record(*q.row)
	}()
	q.dir = caseDir(t, e.ID)

	run := map[string]func(*testing.T) (string, error){
		stages.Inventory: q.inventory, stages.Correctness: q.correctness, stages.Serve: q.serve,
		stages.AIPerf: q.aiperfStage, stages.Artifacts: q.artifacts, stages.Identity: q.identity,
		stages.Influence: q.influence, stages.Timing: q.timing, stages.Cleanup: q.cleanup,
	}
	for _, name := range stages.For(e) {
		ok := q.stage(name, run[name])
		// Nothing runs on an incomplete row, and nothing can be served without a server. The
		// stages after correctness are independent evidence (serving mechanics, identity,
		// timing), so they run even when the family's criteria failed; the row fails either way.
		if !ok && (name == stages.Inventory || name == stages.Serve) {
			return
		}
	}
	if e.Status == spec.Excluded {
		q.row.Outcome = reports.Excluded
	}
}

// stage runs one subtest. A stage returns a one-line summary of what it established, or an
// error naming the failed check; both go into the result row.
func (q *qualification) stage(name string, fn func(t *testing.T) (string, error)) bool {
	var msg string
	ok := q.t.Run(name, func(t *testing.T) {
		summary, err := fn(t)
		if err != nil {
			msg = err.Error()
			t.Fatal(err)
		}
		msg = summary
		if summary != "" {
			t.Log(summary)
		}
	})
	q.row.Stages = append(q.row.Stages, reports.Stage{Name: name, Passed: ok, Message: msg})
	return ok
}

func newRow(e spec.Entry) reports.Row {
	row := reports.Row{
		Checkpoint: e.ID, Family: e.Family, Workload: e.Workload, Profile: e.Profile, Label: reports.Label(e.Profile),
		Revision: e.Revision, Precision: e.Precision, Status: e.Status, Note: e.Note, Outcome: reports.Passed,
		Command: casegen.Command(e), Started: time.Now(), Hardware: hardware(),
	}
	if e.Status != spec.Excluded {
		d := e.Defaults
		row.Settings = &d
	}
	return row
}

// caseDir keeps a case's files under MEDIAQUAL_REPORT_DIR (so they survive a failure), or in
// a temporary directory when no report is wanted.
func caseDir(t *testing.T, id string) string {
	root := os.Getenv("MEDIAQUAL_REPORT_DIR")
	if root == "" {
		return t.TempDir()
	}
	dir := filepath.Join(root, "cases", strings.NewReplacer("/", "_", " ", "_").Replace(id))
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func hardware() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				cpu = strings.TrimSpace(line[strings.Index(line, ":")+1:])
				break
			}
		}
	}
	hw := fmt.Sprintf("%s x%d (%s/%s)", cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
	if out, err := exec.Command("nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader").Output(); err == nil {
		hw += "; GPUs: " + strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", " | ")), " ")
	}
	return hw
}

// gpuPreCheck says exactly what a GPU run is missing, before anything starts.
func gpuPreCheck(e spec.Entry) error {
	if why := bundle.Missing(e); why != "" {
		return fmt.Errorf("check gpu-environment: %s needs its weights: %s", e.ID, why)
	}
	if os.Getenv("MEDIAQUAL_GPUS") == "" {
		return fmt.Errorf("check gpu-environment: set MEDIAQUAL_GPUS to the CUDA device ids for %s (needs %d GPU(s) with %d GB each)", e.ID, e.GPU.Count, e.GPU.MemoryGB)
	}
	return nil
}
