// The qualification suite's driver. Every inventory row gets a generated top-level test
// (cases_*.go, written by `go generate`) that calls qualify; harness/qualify runs the stages
// as subtests with stable names and returns the result row. TestMain builds mediaserve once,
// reads the configuration once and, when MEDIAQUAL_REPORT_DIR is set, writes the report after
// every case has run. docs/QUALIFICATION.md describes the stages.
package mediaqual_test

//go:generate go run ./internal/casegen/gen

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"mediaqual/harness/launch"
	qual "mediaqual/harness/qualify"
	"mediaqual/internal/casegen"
	"mediaqual/models"
	"mediaqual/reports"
)

var (
	config qual.Config // read once by TestMain
	rowsMu sync.Mutex
	rows   []reports.Row
)

func TestMain(m *testing.M) {
	flag.Parse()
	// A GPU host may have no Go toolchain: MEDIAQUAL_MEDIASERVE names a prebuilt binary.
	dir, err := os.MkdirTemp("", "mediaqual-bin-")
	if err == nil {
		config, err = configure(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if out := config.ReportDir; out != "" && len(rows) > 0 {
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
	row := qual.Run(t, e, config)
	row.Command = casegen.Command(e)
	record(row)
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
