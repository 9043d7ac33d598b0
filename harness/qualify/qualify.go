// Package qualify is the qualification of one inventory row against a server: the stages of
// docs/QUALIFICATION.md (named by Stages and the Stage constants), each taking what the stage
// before established and returning its own typed result, run in order as subtests by Run.
// The target is mediaserve, launched here, or an endpoint that is already running
// (Config.Target).
//
// Run is the one entry, so that another module can qualify its own rows or its own server
// from a few lines of its own test, the way go-cloud's drivertest is run from a backend's
// test (docs/EXTERNAL.md; testdata/external is such a module):
//
//	func TestMyModel(t *testing.T) {
//		cfg, err := qualify.FromEnv(".", "")
//		if err != nil {
//			t.Fatal(err)
//		}
//		row := qualify.Run(t, myEntry, cfg)
//		t.Log(row.Outcome)
//	}
//
// Config.Mediaserve is the mediaserve binary: the server launched when no endpoint is set, and
// the native path (`mediaserve task`) identity compares with. Build it with
// `go build -o bin/mediaserve ./cmd/mediaserve` in a clone, or from another module with
// `go build -o mediaserve github.com/mediaqual/mediaqual/cmd/mediaserve` (launch.BuildMediaserve
// does the former); FromEnv takes MEDIAQUAL_MEDIASERVE for a prebuilt one. The example's Root "."
// suits rows of one's own; mediaqual's rows need its module root (Config.Root).
//
// Nothing here knows a model: thresholds come from the row (models/spec), checks from
// harness/check.
package qualify

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/jobmodel"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/internal/procgroup"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/reports"
)

// caseRun is one row's qualification in progress: its test, its configuration, the result row
// being filled and the directory its files are kept in. Stages report into the row; what
// they hand on to later stages is their return value.
type caseRun struct {
	T      *testing.T
	Entry  spec.Entry
	Config Config
	Row    *reports.Row
	Dir    string // this case's kept files: logs, artifacts, native outputs

	ctx       context.Context // the case's: its deadline, and the run's interruption
	run       context.Context // the run's (RunContext): done when the run is interrupted
	inputs    []workItem      // the pinned inputs, built once (items)
	inputsErr error
	steps     []wire.Step       // an endpoint's answers, assessed against the contract at the end
	findings  []wire.Finding    // departures seen outside those steps
	pollHold  time.Duration     // a launched mediaserve's -poll-hold
	own       []string          // X-Request-IDs of the suite's own requests before AIPerf's (the shape probe)
	jobs      []string          // video jobs created for the suite's requests: cleanup deletes each (createdJobs)
	untied    []string          // AIPerf requests whose job the endpoint does not tie to its create (aiperf's account)
	history   *jobmodel.History // every exchange with the server, held to the job API's model at the end
	mu        sync.Mutex        // jobs, claims and clips: the concurrency probe adds to them at once
	// suiteEncodeMS is the longest the suite took to encode (and decode back) a clip's raw frames
	// with the contract's encoder (encode-psnr): a server's encode of them cannot take no time.
	suiteEncodeMS float64
	claims        map[string]float64         // the server's Task time for the suite's own requests, by request id
	clips         map[[sha256.Size]byte]clip // what was probed and decoded of each clip, by its bytes' digest
}

// notCompared is a stage that could not establish anything: it is reported as not run (never
// as a pass), with why.
type notCompared struct{ Why string }

func (n notCompared) Error() string { return "not run: " + n.Why }

// Run qualifies entry against cfg's target, running each stage of Stages(entry) as a
// subtest, and returns the result row. A failed stage fails t, and the row's outcome.
func Run(t *testing.T, entry spec.Entry, cfg Config) (row reports.Row) {
	return RunContext(context.Background(), t, entry, cfg)
}

// RunContext is Run within the run's context: when ctx is done (the run was interrupted, by
// SIGINT for one), the stage in progress stops and fails saying so, the stages after it are
// recorded as not run, a launched server is stopped, and the row's outcome is
// reports.Interrupted, so that an interrupted run's report says what did and did not run.
func RunContext(ctx context.Context, t *testing.T, entry spec.Entry, cfg Config) (row reports.Row) {
	// row is named so that what the deferred function settles (the outcome above all) is
	// what is returned.
	start := time.Now()
	if cfg.Target.Profile.Name == "" {
		cfg.Target.Profile = wire.Mediaserve
	}
	row = NewRow(entry)
	c := &caseRun{T: t, Entry: entry, Config: cfg, Row: &row, run: ctx, history: jobmodel.NewHistory(cfg.Target.Profile)}
	items, _ := c.items() // an error is the stages' to report
	d, _ := CaseDeadline(entry, cfg, len(items))
	ctx, cancel := context.WithTimeoutCause(ctx, d, errCaseDeadline)
	defer cancel()
	c.ctx = ctx
	defer func() {
		row.Duration = time.Since(start).Round(time.Millisecond).String()
		for _, f := range c.assess() {
			row.Findings = append(row.Findings, f.String())
		}
		switch {
		case c.interrupted() != nil:
			row.Outcome = reports.Interrupted
		case t.Failed():
			row.Outcome = reports.Failed
		case row.Gap != "":
			row.Outcome = reports.GapDetected
		}
		row.Earn()
		report(t, row)
	}()
	c.Dir = c.caseDir()
	c.runStages()
	if entry.Status == spec.Excluded {
		row.Outcome = reports.Excluded
	}
	return row
}

// runStages hands each stage's result to the next. Nothing runs on an incomplete row, and
// nothing can be served without a server. The stages after correctness are independent
// evidence (serving mechanics, identity, timing), so they run even when the family's
// criteria failed; the row fails either way.
func (c *caseRun) runStages() {
	var (
		bundle bundleFacts
		native nativeOutputs
		served *serving
		run    aiperfRun
		arts   artifactSet
	)
	for i, name := range Stages(c.Entry) {
		if why := c.interrupted(); why != nil {
			for _, rest := range Stages(c.Entry)[i:] {
				c.Row.Stages = append(c.Row.Stages, reports.Stage{Name: rest, NotRun: true, Message: "not run: the run was interrupted (" + why.Error() + ")"})
			}
			return
		}
		var fn func() (string, error)
		switch name {
		case StageInventory:
			fn = func() (s string, err error) {
				if err := c.Config.RootHolds(c.Entry); err != nil {
					return "", err
				}
				bundle, s, err = c.inventory()
				return
			}
		case StageCorrectness:
			fn = func() (s string, err error) { native, s, err = c.correctness(bundle); return }
		case StageServe:
			fn = func() (s string, err error) { served, s, err = c.serve(); return }
		case StageAIPerf:
			fn = func() (s string, err error) {
				// The jobs listed before the suite creates any (the model's listing rule), then the
				// shape probe; its failure does not keep AIPerf from running, so that a server
				// failing every job is still held to AIPerf's accounting.
				c.listJobs(served)
				probe, perr := c.shapeProbe(served, native)
				run, s, err = c.aiperf(served)
				return s + probe, errors.Join(perr, err)
			}
		case StageArtifacts:
			fn = func() (s string, err error) { arts, s, err = c.fetchArtifacts(served, native, run); return }
		case StageIdentity:
			fn = func() (string, error) { return c.identity(native, arts) }
		case StageInfluence:
			fn = func() (string, error) { return c.influence(served) }
		case StageTiming:
			fn = func() (string, error) { return c.timing(arts, native) }
		case StageConcurrency:
			fn = func() (string, error) { return c.concurrency(served, arts, native) }
		case StageCleanup:
			fn = func() (string, error) { return c.cleanup(served, arts) }
		case StageHistory:
			fn = func() (string, error) { return c.holdHistory(served) }
		}
		if !c.stage(name, fn) && (name == StageInventory || name == StageServe) {
			return
		}
	}
}

// stage runs one subtest. A stage returns a one-line summary of what it established, or an
// error naming the failed check; both go into the result row. notCompared skips the subtest
// and is recorded as not passed.
func (c *caseRun) stage(name string, fn func() (string, error)) bool {
	var msg string
	var failed []string // the checks that failed, by their Failures
	var skipped bool
	ok := c.T.Run(name, func(t *testing.T) {
		summary, err := fn()
		err = c.deadline(name, err)
		// logf and SkipNow/FailNow, not t.Skip/Fatal, which put this file's line first.
		var nc notCompared
		if errors.As(err, &nc) {
			msg, skipped = nc.Error(), true
			c.limit(spec.Implemented, name+" "+msg)
			logf(t, "%s", msg)
			t.SkipNow()
		}
		if err != nil {
			msg, failed = err.Error(), check.Names(err)
			logf(t, "%s", msg)
			t.FailNow()
		}
		msg = summary
		if summary != "" {
			logf(t, "%s", summary)
		}
	})
	st := reports.Stage{Name: name, Passed: ok && !skipped, NotRun: skipped, Message: msg, Checks: failed}
	if len(failed) > 0 {
		st.Check = failed[0]
	}
	c.Row.Stages = append(c.Row.Stages, st)
	return ok
}

// report prints what the row's verdict rests on, in go test -v's output (not only in a
// report, which a run need not ask for): its findings, its limits and what it earned.
func report(t *testing.T, row reports.Row) {
	for _, f := range row.Findings {
		logf(t, "finding: %s", f)
	}
	for _, l := range row.Limits {
		logf(t, "limit: at most %s: %s", l.Ceiling, l.Why)
	}
	earned := string(row.Earned)
	switch {
	case earned != "":
	case row.Outcome != reports.Passed:
		earned = "nothing (" + row.Outcome + ")"
	default:
		earned = "nothing (" + row.Label + ")"
	}
	logf(t, "outcome: %s; earned: %s", row.Outcome, earned)
}

// logf is t.Logf without the file:line t.Logf puts first, which for the qualification's lines
// is the same few lines of this package every time.
func logf(t *testing.T, format string, args ...any) {
	fmt.Fprintf(t.Output(), format+"\n", args...)
}

// interrupted is why the run was interrupted, or nil while it was not: the cause of the run's
// context (RunContext), which the case's own deadline does not set.
func (c *caseRun) interrupted() error {
	if c.run == nil || c.run.Err() == nil {
		return nil
	}
	return context.Cause(c.run)
}

// assess lists an endpoint's departures from the contract, from every answer the run kept
// (wire.Assess); a launched mediaserve is held to the contract by the stages themselves.
func (c *caseRun) assess() []wire.Finding {
	fs := c.findings
	if len(c.steps) == 0 {
		return fs
	}
	more, err := wire.Assess(wire.Exchange{Profile: c.Config.Target.Profile.Name, Source: "this run", Steps: c.steps})
	if err != nil {
		more = append(more, wire.Finding{Name: "unreadable", Detail: err.Error()})
	}
	for _, f := range more {
		if !slices.Contains(fs, f) {
			fs = append(fs, f)
		}
	}
	return fs
}

// NewRow is entry's result row before anything has run.
func NewRow(e spec.Entry) reports.Row {
	row := reports.Row{
		Checkpoint: e.ID, Family: e.Family, Workload: e.Workload, Profile: e.Profile, Label: reports.Label(e.Profile),
		Revision: e.Revision, Precision: e.Precision, Status: e.Status, Note: e.Note, Outcome: reports.Passed,
		Started: time.Now(), Hardware: hardware(),
	}
	if e.Status != spec.Excluded {
		d := e.Defaults
		row.Settings = &d
	}
	return row
}

// limit records what keeps this run below the top of the ladder.
func (c *caseRun) limit(ceiling spec.Status, why string) {
	c.Row.Limits = append(c.Row.Limits, reports.Limit{Ceiling: ceiling, Why: why})
}

// caseDir keeps a case's files under the report directory (so they survive a failure), or in
// a temporary directory when no report is wanted.
func (c *caseRun) caseDir() string {
	if c.Config.ReportDir == "" {
		return c.T.TempDir()
	}
	dir := filepath.Join(c.Config.ReportDir, "cases", strings.NewReplacer("/", "_", " ", "_").Replace(c.Entry.ID))
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.T.Fatal(err)
	}
	return dir
}

// toolOutput is a tool's answer to a query for the report (versions, GPUs), bounded by
// toolTimeout: nvidia-smi on a wedged GPU can hang for minutes, and a line of the report is
// not worth a hung run.
func toolOutput(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, toolTimeout)
	defer cancel()
	out, err := procgroup.Own(exec.CommandContext(ctx, name, args...)).Output()
	return string(out), err
}

const toolTimeout = 30 * time.Second

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
	if out, err := toolOutput(context.Background(), "nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"); err == nil {
		hw += "; GPUs: " + strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(out), "\n", " | ")), " ")
	}
	return hw
}
