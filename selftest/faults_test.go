package selftest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/jobmodel"
	qual "github.com/mediaqual/mediaqual/harness/qualify"
	"github.com/mediaqual/mediaqual/internal/casegen"
	"github.com/mediaqual/mediaqual/reports"
	"github.com/mediaqual/mediaqual/server"
)

// faultCases pairs every injectable fault with the checkpoint it is tried on and the check
// that must catch it. docs/FAULTS.md is this table in prose.
var faultCases = []struct {
	fault, checkpoint, check string
}{
	{"ignore-reference", "ref-edit", "influence-changes-output"},
	// Identity fails too (the native path runs the prompts asked); an endpoint has none.
	{"prompt-ignored", "ref-t2v", "distinct-outputs"},
	// Identity fails too here; a Task with a fixed generator would agree with itself.
	{"seed-ignored", "ref-t2v", "seed-influence"},
	{"wrong-frame-count", "ref-t2v", "frame-count"},
	{"wrong-fps", "ref-t2v", "fps"},
	// Count, average rate and duration are right: only the frames' own timestamps are not.
	{"uneven-frames", "ref-t2v", "frame-timing"},
	{"wrong-size", "ref-t2v", "size"},
	// Identity fails too (the native path encodes the right frames); a server's encoder and its
	// native path's are one, so a broken encoder would fail only this.
	{"swaps-channels", "ref-t2v", "encode-psnr"},
	{"nondeterministic", "ref-t2v", "artifact-sha256"},
	{"corrupt-mp4", "ref-t2v", "container"},
	{"job-fails", "ref-t2v", "aiperf-accounting"},
	// Each hung job is followed to its request deadline (4 s here), then named.
	{"job-hangs", "ref-t2v", "deadline"},
	{"poll-500", "ref-t2v", "aiperf-accounting"},
	// AIPerf downloads every video, so it is the first to see the file gone.
	{"artifact-missing", "ref-t2v", "aiperf-accounting"},
	{"delete-leaves-files", "ref-t2v", "no-leftover-files"},
	{"latency-spike", "ref-t2v", "timing-overhead"},
	{"edit-unchanged", "ref-edit", "edit-unchanged"},
	{"delete-keeps-job", "ref-t2v", "delete"},
	{"ledger-wrong-digest", "ref-t2v", "ledger-digest"},
	{"no-task-wall", "ref-t2v", "task-wall"},
	{"task-overstated", "ref-edit", "task-wall"},
	// AIPerf downloads each video once; the suite's own fetch is the second.
	{"refetch-fails", "ref-t2v", "artifact-fetch"},
	{"load-fails", "ref-t2v", "launch"},
	{"exit-nonzero", "ref-t2v", "clean-exit"},
	// The server reports the settings it really ran (half the steps): the artifacts stage holds
	// every served actual to what was asked, before identity would see other bytes.
	{"actual-differs", "ref-t2v", "actual-settings"},
	// The pinned inputs are within range: only the serve stage's refusals send steps past it.
	{"clamps-steps", "ref-t2v", "refuses-unsupported"},
	{"actual-unasked", "ref-edit", "actual-settings"},
	// The aiperf stage's shape probe serves another size first; without it every served job
	// before identity has the pinned shape and this fault passes.
	{"history-bytes", "ref-t2v", "artifact-sha256"},
	// The job is gone (GET answers 404), its content is not: cleanup asks for both.
	{"content-undeleted", "ref-t2v", "delete"},
	// Identity passes both (the native path shares the encoder, and the fault): the suite's own
	// encode of the raw frames with the contract's settings sees the lost detail.
	{"downscaled", "ref-t2v", "encode-psnr"},
	{"limited-range", "ref-t2v", "encode-psnr"},
	// 1000 times the Task: longer than the whole request the client timed.
	{"inference-ms", "ref-t2v", "task-wall"},
	{"inference-halved", "ref-edit", "task-time-agrees"},
	{"task-is-total", "ref-t2v", "timing-parts"},
	// Consistent liars: the server's reports agree with each other and add up; the native
	// path's own timing of the same Task refutes the first, the suite's own encode the second.
	{"task-halved", "ref-t2v", "task-native"},
	{"task-is-all", "ref-t2v", "timing-parts"},
	// The job API's model, held to the row's history (harness/jobmodel.Rules): one fault a rule.
	// AIPerf's last poll of each job is in its records: the first answer with another job's id.
	{"poll-other-job", "ref-t2v", "job-identity"},
	// The concurrency probe polls each job once after it completed.
	{"status-regresses", "ref-t2v", "job-status"},
	{"completed-at-ms", "ref-t2v", "job-timestamps"},
	// The concurrency probe asks each job's content at once: the second job is still queued.
	{"content-early", "ref-t2v", "job-content"},
	{"delete-still-listed", "ref-t2v", "job-deleted"},
	{"double-create", "ref-t2v", "job-orphans"},
	// The shape probe asks another frame count; the pinned clip is at 16 fps.
	{"seconds-wrong", "ref-t2v", "job-fields"},
	// Only the shape probe sends a reference of another aspect than the output's; the native
	// path runs the same inputs.
	{"reference-cropped", "ref-edit", "probe-identity"},
	// Only the concurrency probe has two jobs in flight at once.
	{"second-job-lost", "ref-edit", "concurrency"},
}

// TestEveryFaultHasACase: a fault mediaserve offers without a self-test case proves nothing,
// and a case for a fault mediaserve does not have would fail at the server's flag.
func TestEveryFaultHasACase(t *testing.T) {
	var cased []string
	for _, fc := range faultCases {
		require.NotContains(t, cased, fc.fault, "two cases for one fault")
		assert.True(t, check.Registered(fc.check), "fault %s is to be caught by %s, which is no registered check", fc.fault, fc.check)
		cased = append(cased, fc.fault)
	}
	slices.Sort(cased)
	assert.Equal(t, server.FaultNames(), cased, "server.Faults and faultCases (faults_test.go) must name the same faults")
}

// TestEveryModelRuleHasItsFault: each rule of the job API's model names the fault that shows it
// failing, and the fault self-test runs that fault expecting that rule's check.
func TestEveryModelRuleHasItsFault(t *testing.T) {
	for _, r := range jobmodel.Rules {
		assert.Contains(t, faultCases, struct{ fault, checkpoint, check string }{r.Fault, "ref-t2v", r.Check}, "rule %s", r.Check)
	}
}

// TestFaultsAreCaught runs the real qualification of a reference checkpoint against a
// mediaserve with one fault switched on, in a child run of the driver, and asserts that
// the case fails at the check made for that fault, by name. The children share nothing (each
// has its own server on port 0, its own directories and AIPerf), so they run in parallel, as
// many at once as -parallel allows (GOMAXPROCS): one child keeps about one core busy, and one
// after another they were the longest part of make test.
func TestFaultsAreCaught(t *testing.T) {
	if _, err := qual.InstalledAIPerf(root); err != nil {
		t.Fatalf("the fault self-test needs the pinned AIPerf: %v", err)
	}
	for _, fc := range faultCases {
		t.Run(fc.fault, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			name := casegen.TestName(fc.checkpoint)
			cmd := exec.CommandContext(ctx, driver, "-test.run", "^"+name+"$", "-test.v", "-test.count=1")
			// The child launches the mediaserve this run built rather than building its own, and
			// writes its report here: the row must say failed too.
			reportDir := t.TempDir()
			cmd.Env = append(withoutEnv(os.Environ(), "MEDIAQUAL_REPORT_DIR", "MEDIAQUAL_MEDIASERVE"), qual.EnvFault+"="+fc.fault,
				"MEDIAQUAL_REQUEST_TIMEOUT=4s", "MEDIAQUAL_MEDIASERVE="+mediaserve, "MEDIAQUAL_REPORT_DIR="+reportDir)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "%s passed with fault %s switched on:\n%s", name, fc.fault, out)
			assert.Contains(t, string(out), "--- FAIL: "+name, "the case itself must fail")
			b, err := os.ReadFile(filepath.Join(reportDir, "results.json"))
			require.NoError(t, err, "the child's report")
			var rep reports.Report
			require.NoError(t, json.Unmarshal(b, &rep))
			require.Len(t, rep.Rows, 1)
			assert.Equal(t, reports.Failed, rep.Rows[0].Outcome, "the report's row of a failed case")
			assert.NotContains(t, string(b), ".run-", "the report names its files where they are after the run, not in the staging directory")
			// The check is read from the report (each stage's failed checks, from its typed
			// failures), not from the output's text.
			var caught []string
			for _, s := range rep.Rows[0].Stages {
				if !s.Passed {
					caught = append(caught, s.Checks...)
				}
			}
			assert.Contains(t, caught, fc.check, "fault %s must be caught by check %s; output:\n%s", fc.fault, fc.check, lastLines(string(out), 40))
		})
	}
}

// TestHungEndpointStillReportsEveryRow qualifies two rows, in a child run, against an endpoint
// that accepts connections and never answers: each fails its serve stage by its request
// deadline (check "deadline", read from the report, not the output), the run ends long before
// go test's own timeout, and the report holds both rows.
func TestHungEndpointStillReportsEveryRow(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // never read, never answered
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reportDir := t.TempDir()
	cmd := exec.CommandContext(ctx, driver, "-test.run", "^(TestRef_t2v|TestRef_edit)$", "-test.v", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(withoutEnv(os.Environ(), "MEDIAQUAL_REPORT_DIR", "MEDIAQUAL_MEDIASERVE", qual.EnvRequestTimeout),
		qual.EnvEndpoint+"=http://"+ln.Addr().String(), qual.EnvRequestTimeout+"=2s",
		"MEDIAQUAL_MEDIASERVE="+mediaserve, "MEDIAQUAL_REPORT_DIR="+reportDir)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "qualifying a silent endpoint passed:\n%s", out)
	assert.NotContains(t, string(out), "panic: test timed out", "the run must end by its own deadlines")
	t.Logf("child run took %s", time.Since(start).Round(time.Second))
	b, err := os.ReadFile(filepath.Join(reportDir, "results.json"))
	require.NoError(t, err, "the report of a run against a hung endpoint:\n%s", lastLines(string(out), 30))
	var rep reports.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Len(t, rep.Rows, 2, "every row of the run")
	for _, row := range rep.Rows {
		assert.Equal(t, reports.Failed, row.Outcome, row.Checkpoint)
		var failed []string
		for _, s := range row.Stages {
			if !s.Passed && s.Check != "" {
				failed = append(failed, s.Name+"/"+s.Check)
			}
		}
		assert.Equal(t, []string{"serve/deadline"}, failed, row.Checkpoint)
	}
}

// TestFaultsDocIsTheTable holds docs/FAULTS.md to faultCases: one table row per fault with its
// checkpoint and check, and the count its prose states.
func TestFaultsDocIsTheTable(t *testing.T) {
	b, err := os.ReadFile("docs/FAULTS.md")
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\|[^\\n]*\\| ([a-z0-9-]+) \\| [a-z]+ / `([a-z0-9-]+)`")
	var doc, want []string
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		doc = append(doc, m[1]+" "+m[2]+" "+m[3])
	}
	for _, fc := range faultCases {
		want = append(want, fc.fault+" "+fc.checkpoint+" "+fc.check)
	}
	assert.ElementsMatch(t, want, doc, "docs/FAULTS.md's table (fault, checkpoint, check) against faultCases")
	assert.Contains(t, string(b), fmt.Sprintf("(the %d above)", len(faultCases)), "docs/FAULTS.md's count of faults")
}
