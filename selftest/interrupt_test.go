package selftest

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	qual "github.com/mediaqual/mediaqual/harness/qualify"
	"github.com/mediaqual/mediaqual/internal/casegen"
	"github.com/mediaqual/mediaqual/reports"
)

// TestInterruptedRunLeavesOneReport is Ctrl-C during a qualification: a child run of two rows
// (building its own mediaserve, as make qualify does) over a report directory holding a
// previous run's report gets SIGINT, sent to its process group as a terminal sends it, while
// the first row's AIPerf runs. The directory must then hold one run's report, not a mix: the
// new one, marked interrupted, saying which row stopped in which stage and which never
// started, with no file of the previous report left; and the child's temporary files (its
// mediaserve binary, AIPerf's and the server's directories) must be gone. Without the
// interrupt handling the child died at once: results.json was the previous run's while
// cases/ held the new run's half-written ref-t2v, and the mediaserve binary stayed in TMPDIR.
func TestInterruptedRunLeavesOneReport(t *testing.T) {
	if _, err := qual.InstalledAIPerf(root); err != nil {
		t.Fatalf("needs the pinned AIPerf: %v", err)
	}
	parent := t.TempDir()
	out := filepath.Join(parent, "out")
	previous := map[string]string{
		"results.json":                `{"generated": "2000-01-01T00:00:00Z", "command": "the previous run", "rows": []}`,
		"results.md":                  "# the previous run\n",
		"index.html":                  "<p>the previous run</p>\n",
		"junit.xml":                   "<testsuites/>\n",
		"cases/ref-t2v/previous.txt":  "the previous run\n",
		"cases/ref-edit/previous.txt": "the previous run\n",
	}
	for name, body := range previous {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(out, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(out, name), []byte(body), 0o644))
	}
	tmp := t.TempDir() // the child's TMPDIR: empty again after it

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, driver, "-test.run", "^(TestRef_t2v|TestRef_edit)$", "-test.v", "-test.count=1", "-test.timeout=3m")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	env := withoutEnv(os.Environ(), "MEDIAQUAL_REPORT_DIR", "TMPDIR", qual.EnvRequestTimeout, qual.EnvCaseTimeout)
	if os.Getenv("MEDIAQUAL_MEDIASERVE") == "" { // else no Go here to build with
		env = withoutEnv(env, "MEDIAQUAL_MEDIASERVE")
	}
	cmd.Env = append(env, "MEDIAQUAL_REPORT_DIR="+out, "TMPDIR="+tmp)
	output := startWatching(ctx, t, cmd, "=== RUN   TestRef_t2v/aiperf")
	require.NoError(t, ctx.Err(), "the child never reached ref-t2v's aiperf stage")
	time.Sleep(2 * time.Second) // AIPerf started and sending
	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
	signalled := time.Now()
	err := cmd.Wait()
	log := output()
	require.Error(t, err, "an interrupted run exited 0:\n%s", lastLines(log, 30))
	assert.Less(t, time.Since(signalled), time.Minute, "the run must stop promptly on SIGINT")
	assert.NotContains(t, log, "panic:")
	t.Logf("the child, interrupted %s after its aiperf stage began:\n%s", 2*time.Second, lastLines(log, 25))

	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var rep reports.Report
	require.NoError(t, json.Unmarshal(b, &rep), "results.json:\n%s", b)
	require.Equal(t, "interrupt signal", rep.Interrupted, "the new report, marked interrupted:\n%s", lastLines(log, 30))
	outcomes := map[string]string{}
	for _, r := range rep.Rows {
		outcomes[r.Checkpoint] = r.Outcome
		if r.Checkpoint != "ref-t2v" {
			continue
		}
		var stages []string
		for _, s := range r.Stages {
			state := "passed"
			switch {
			case strings.HasPrefix(s.Message, "interrupted:"):
				state = "interrupted"
			case strings.HasPrefix(s.Message, "not run: the run was interrupted"):
				state = "not run"
			case !s.Passed:
				state = "failed: " + s.Message
			}
			stages = append(stages, s.Name+" "+state)
		}
		assert.Equal(t, []string{"inventory passed", "correctness passed", "serve passed", "aiperf interrupted",
			"artifacts not run", "identity not run", "timing not run", "concurrency not run", "cleanup not run", "history not run"}, stages)
	}
	assert.Equal(t, map[string]string{"ref-t2v": reports.Interrupted, "ref-edit": reports.NotRun}, outcomes)
	for _, name := range []string{"results.md", "index.html"} {
		b, err := os.ReadFile(filepath.Join(out, name))
		require.NoError(t, err)
		assert.Contains(t, string(b), "INTERRUPTED (interrupt signal)", name)
	}

	// Nothing of the previous report is left beside the new one.
	var files []string
	require.NoError(t, filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(out, path)
			files = append(files, rel)
			b, _ := os.ReadFile(path)
			assert.NotContains(t, string(b), "the previous run", "%s is the previous run's", rel)
		}
		return err
	}))
	assert.Contains(t, files, "cases/ref-t2v/ledger.jsonl", "the new run's case files")
	assert.NotContains(t, files, "junit.xml", "the previous run's junit.xml (make qualify writes the new one)")
	entries, err := os.ReadDir(filepath.Join(out, "cases"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the case that ran has files")
	siblings, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, siblings, 1, "nothing beside the report directory: %v", siblings)

	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	assert.Empty(t, names, "the interrupted run's temporary files")
}

// TestMakeQualifyInterrupted is the same from make's side: `make qualify` over a report
// directory holding a previous run's report, its process group sent SIGINT (as Ctrl-C sends
// it) while ref-t2v runs, must end with the new report in place, junit.xml included, and a
// last line saying the run was interrupted; a run that writes no report (here one refused at
// configuration) must leave the previous report whole, junit.xml included, and say so. Before,
// make printed "results: ..." either way, over a previous run's report with the new junit.xml.
func TestMakeQualifyInterrupted(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("needs make")
	}
	if _, err := qual.InstalledAIPerf(root); err != nil {
		t.Fatalf("needs the pinned AIPerf: %v", err)
	}
	previous := map[string]string{
		"results.json": `{"generated": "2000-01-01T00:00:00Z", "command": "the previous run", "rows": []}`,
		"results.md":   "# the previous run\n", "index.html": "<p>the previous run</p>\n", "junit.xml": "<testsuites/>\n",
		"cases/ref-t2v/previous.txt": "the previous run\n",
	}
	setup := func(t *testing.T) string {
		out := filepath.Join(t.TempDir(), "out")
		for name, body := range previous {
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(out, name)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(out, name), []byte(body), 0o644))
		}
		return out
	}
	makeQualify := func(ctx context.Context, out string, env ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "qualify", "REPORT_DIR="+out, "QUALIFY_RUN=^(TestRef_t2v|TestRef_edit)$")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Env = append(withoutEnv(os.Environ(), "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MEDIAQUAL_REPORT_DIR",
			qual.EnvRequestTimeout, qual.EnvCaseTimeout, qual.EnvLayout), env...)
		return cmd
	}
	lastLine := func(s string) string {
		lines := strings.Split(strings.TrimSpace(s), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			if strings.HasPrefix(lines[i], "results") || strings.HasPrefix(lines[i], "no results") {
				return lines[i]
			}
		}
		return ""
	}

	t.Run("interrupted", func(t *testing.T) {
		out := setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := makeQualify(ctx, out)
		output := startWatching(ctx, t, cmd, "TestRef_t2v/serve") // gotestsum's line as serve passes
		require.NoError(t, ctx.Err(), "make qualify never got past ref-t2v's serve stage")
		time.Sleep(2 * time.Second) // into the aiperf stage
		require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
		err := cmd.Wait()
		log := output()
		require.Error(t, err, "make qualify succeeded although interrupted:\n%s", log)
		t.Logf("make qualify, interrupted:\n%s", lastLines(log, 12))
		assert.True(t, strings.HasPrefix(lastLine(log), "results of an INTERRUPTED run"), "make's summary line: %q", lastLine(log))
		b, err := os.ReadFile(filepath.Join(out, "results.json"))
		require.NoError(t, err)
		var rep reports.Report
		require.NoError(t, json.Unmarshal(b, &rep))
		assert.Equal(t, "interrupt signal", rep.Interrupted)
		require.NotEmpty(t, rep.Rows)
		for _, r := range rep.Rows {
			if r.Checkpoint == "ref-t2v" { // its AIPerf ran: the command names where its files are now
				assert.Contains(t, r.AIPerfCommand, "--artifact-dir "+out+"/cases/ref-t2v/", "the report's AIPerf command")
			}
		}
		junit, err := os.ReadFile(filepath.Join(out, "junit.xml"))
		require.NoError(t, err)
		assert.Contains(t, string(junit), "TestRef_t2v", "this run's junit.xml, beside its report")
		_, err = os.Stat(filepath.Join(out, "cases", "ref-t2v", "previous.txt"))
		assert.ErrorIs(t, err, fs.ErrNotExist, "a file of the previous report")
		siblings, _ := os.ReadDir(filepath.Dir(out))
		assert.Len(t, siblings, 1, "nothing beside the report directory: %v", siblings)
	})

	t.Run("no-report", func(t *testing.T) {
		out := setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		b, err := makeQualify(ctx, out, qual.EnvLayout+"=not-a-layout").CombinedOutput()
		require.Error(t, err, "make qualify with a bad MEDIAQUAL_LAYOUT:\n%s", b)
		assert.True(t, strings.HasPrefix(lastLine(string(b)), "no results: the run ended before writing a report"), "make's summary line: %q\n%s", lastLine(string(b)), b)
		for name, body := range previous {
			got, err := os.ReadFile(filepath.Join(out, name))
			require.NoError(t, err)
			assert.Equal(t, body, string(got), "%s of the previous report", name)
		}
		siblings, _ := os.ReadDir(filepath.Dir(out))
		assert.Len(t, siblings, 1, "nothing beside the report directory: %v", siblings)
	})
}

// The excluded rows (the inventory says why) are skips with their reason, in go test's output
// and so in JUnit, and "excluded" in the report: nothing was qualified, so nothing passes.
// Before, each was --- PASS (JUnit: a passed testcase) after its inventory stage.
func TestExcludedRowsAreSkips(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reportDir := filepath.Join(t.TempDir(), "out")
	cmd := exec.CommandContext(ctx, driver, "-test.run", "^(TestCosmos3_Nano|TestLTX_Video)$", "-test.v", "-test.count=1")
	cmd.Env = append(withoutEnv(os.Environ(), "MEDIAQUAL_REPORT_DIR", "MEDIAQUAL_MEDIASERVE"),
		"MEDIAQUAL_MEDIASERVE="+mediaserve, "MEDIAQUAL_REPORT_DIR="+reportDir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	b, err := os.ReadFile(filepath.Join(reportDir, "results.json"))
	require.NoError(t, err)
	var rep reports.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Len(t, rep.Rows, 2)
	for _, row := range rep.Rows {
		assert.Equal(t, reports.Excluded, row.Outcome, row.Checkpoint)
		require.NotEmpty(t, row.Note, row.Checkpoint)
		name := casegen.TestName(row.Checkpoint)
		assert.Contains(t, string(out), "--- SKIP: "+name, "%s:\n%s", row.Checkpoint, out)
		assert.NotContains(t, string(out), "--- PASS: "+name+" ")
		assert.Contains(t, string(out), "excluded by the inventory, nothing qualified: "+strings.SplitN(row.Note, "\n", 2)[0], row.Checkpoint)
	}
	// The stages' lines say what they established, without one file:line before them all.
	assert.Contains(t, string(out), "excluded by the inventory")
	assert.NotRegexp(t, `qualify\.go:\d+:`, string(out))
}
