// The qualification suite's driver. Every inventory row gets a generated top-level test
// (cases_*.go, written by `go generate`) that calls qualify; harness/qualify runs the stages
// as subtests with stable names and returns the result row. TestMain builds mediaserve once,
// reads the configuration once and, when MEDIAQUAL_REPORT_DIR is set, writes the report after
// every case has run. docs/QUALIFICATION.md describes the stages.
package mediaqual_test

//go:generate go run ./cmd/casegen

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mediaqual/mediaqual/harness/launch"
	qual "github.com/mediaqual/mediaqual/harness/qualify"
	"github.com/mediaqual/mediaqual/internal/casegen"
	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/reports"
)

var (
	config qual.Config // read once by TestMain
	// run is done, its cause the signal, when the run is interrupted (SIGINT, SIGTERM): the
	// case in progress stops, the cases after it are recorded as not run, and the report says so.
	run    context.Context
	rowsMu sync.Mutex
	rows   []reports.Row
)

func TestMain(m *testing.M) {
	flag.Parse()
	ctx, interrupt := context.WithCancelCause(context.Background())
	run = ctx
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		signal.Stop(sig) // a second signal ends the run at once
		fmt.Fprintf(os.Stderr, "mediaqual: %v: stopping the case in progress; the report will say what did and did not run\n", s)
		interrupt(fmt.Errorf("%v signal", s))
	}()
	os.Exit(runAll(m))
}

// runAll builds what the run needs, runs the tests and writes the report. Whatever happens,
// its temporary files go, and the report directory holds one run's report: this one's, written
// beside it and moved in whole (marked interrupted if the run was), or the previous one as it was.
func runAll(m *testing.M) int {
	// A GPU host may have no Go toolchain: MEDIAQUAL_MEDIASERVE names a prebuilt binary.
	dir, err := os.MkdirTemp("", "mediaqual-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if config, err = configure(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := config.ReportDir
	if out != "" {
		if err := reports.Replaceable(out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		staging, err := os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+".run-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(staging) // gone once moved in; a run that writes no report leaves the old one
		config.ReportDir = staging
	}
	code := m.Run()
	why := ""
	if run.Err() != nil {
		why = context.Cause(run).Error()
		fmt.Fprintf(os.Stderr, "mediaqual: the run was interrupted (%s)\n", why)
		code = max(code, 1)
	}
	if out == "" || len(rows) == 0 {
		return code
	}
	shown, err := reports.Moved(rows, config.ReportDir, out)
	if err == nil {
		_, err = reports.WriteFiles(config.ReportDir, reports.Report{
			Generated: time.Now(), Command: casegen.RunCommand(os.Args, buildTags), Interrupted: why, Rows: shown, Inventory: models.Inventory(),
		})
	}
	if err == nil {
		err = reports.ReplaceDir(out, config.ReportDir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "writing reports:", err)
		return 1
	}
	for _, name := range []string{"results.json", "results.md", "index.html"} {
		fmt.Println("report:", filepath.Join(out, name))
	}
	return code
}

// configure reads the environment and builds mediaserve into dir unless a prebuilt one is named.
func configure(dir string) (qual.Config, error) {
	root, err := os.Getwd() // go test runs the root package in the module root
	if err != nil {
		return qual.Config{}, err
	}
	cfg, err := qual.FromEnv(root, filepath.Join(dir, "mediaserve"))
	if err != nil {
		return cfg, err
	}
	cfg.Lookup = models.Lookup
	if cfg.Mediaserve == filepath.Join(dir, "mediaserve") {
		if err := launch.BuildMediaserve(root, cfg.Mediaserve); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// qualify is one generated case: the row's qualification against the configured target.
func qualify(t *testing.T, id string) {
	e, err := models.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	if run.Err() != nil {
		row := qual.NewRow(e)
		row.Command = casegen.Command(e)
		row.Outcome = reports.NotRun
		row.Note = fmt.Sprintf("not run: the run was interrupted (%v) before this case started", context.Cause(run))
		record(row)
		t.Skip(row.Note)
	}
	row := qual.RunContext(run, t, e, config)
	row.Command = casegen.Command(e)
	record(row)
	if row.Outcome == reports.Excluded && !t.Failed() {
		// Nothing was qualified: the case is a skip with its reason (JUnit <skipped>), not a pass.
		t.Skipf("excluded by the inventory, nothing qualified: %s", e.Note)
	}
}

// needsGPUTag is what a GPU checkpoint's test does in a build without -tags gpu.
// The row is still reported, as not run: nothing is counted as a pass.
func needsGPUTag(t *testing.T, id string) {
	e, err := models.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	row := qual.NewRow(e)
	row.Command = casegen.Command(e)
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
