package reports

import (
	"bytes"
	"encoding/json"
	"image"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/spec"
)

func sample() Report {
	return Report{
		Generated: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), Command: "make qualify",
		Rows: []Row{
			{Checkpoint: "ref-t2v", Workload: spec.TextToVideo, Profile: "reference/L0", Label: Label("reference/L0"), Outcome: Passed,
				Stages:  []Stage{{Name: "artifacts", Passed: true, Message: "5 verified"}},
				Timing:  &Timing{Requests: 4, ClientP50MS: 300, TaskP50MS: 70, ItemsPerSecond: 3.3, FramesPerSecond: 56, PollIntervalMS: 100},
				Command: "go test -run '^TestRef_t2v$' ."},
			{Checkpoint: "Wan-AI/Wan2.1-T2V-1.3B", Workload: spec.TextToVideo, Profile: "full", Label: Label("full"), Outcome: NotRun, Status: spec.Planned},
			{Checkpoint: "ref-t2i", Workload: spec.ImageEdit, Profile: "reference/L0", Outcome: GapDetected, Gap: spec.GapIgnoresReference,
				Stages: []Stage{{Name: "influence", Passed: true}}},
		},
		Inventory: []spec.Entry{{Checkpoint: spec.Checkpoint{ID: "nvidia/Cosmos3-Nano", Family: "cosmos"}, Status: spec.Excluded, Note: "excluded: partial/L0 profile only",
			Workload: spec.TextToVideo, Variants: nil}},
	}
}

func TestMarkdownShowsRowsLabelsAndInventory(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, Markdown(&b, sample()))
	md := b.String()
	assert.Contains(t, md, "| ref-t2v | reference/L0 machinery check, not a model qualification | passed |")
	assert.Contains(t, md, "| Wan-AI/Wan2.1-T2V-1.3B | model | not run | planned |")
	assert.Contains(t, md, "capability gap detected (expected): "+spec.GapIgnoresReference)
	assert.Contains(t, md, "3.300 clips/s, 56.00 frames/s")
	assert.Contains(t, md, "poll every 100 ms")
	assert.Contains(t, md, "| nvidia/Cosmos3-Nano | text_to_video | cosmos |")
	assert.Contains(t, md, "reproduce: `go test -run '^TestRef_t2v$' .`")
}

func TestWriteFilesRoundTrips(t *testing.T) {
	dir := t.TempDir()
	paths, err := WriteFiles(dir, sample())
	require.NoError(t, err)
	require.Len(t, paths, 3)
	b, err := os.ReadFile(paths[0])
	require.NoError(t, err)
	var back Report
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Len(t, back.Rows, 3)
	assert.Equal(t, "ref-t2i", back.Rows[0].Checkpoint, "rows are sorted, those that ran first")
	assert.Equal(t, "Wan-AI/Wan2.1-T2V-1.3B", back.Rows[2].Checkpoint, "the row not run last")
}

func TestLabelNeverClaimsMore(t *testing.T) {
	assert.Contains(t, Label("reference/L0"), "not a model qualification")
	assert.Contains(t, Label("L0-random"), "not quality")
	assert.Equal(t, "model", Label("full"))
}

func TestEarnNeverExceedsALimit(t *testing.T) {
	row := Row{Profile: "full", Outcome: Passed}
	row.Earn()
	assert.Equal(t, spec.AIPerfQualified, row.Earned)
	row.Limits = []Limit{{spec.FamilyValidated, "quick run"}, {spec.Implemented, "no pinned revision"}}
	row.Earn()
	assert.Equal(t, spec.Implemented, row.Earned, "the lowest ceiling holds")
	row.Outcome = Failed
	row.Earn()
	assert.Empty(t, row.Earned)
	ref := Row{Profile: "reference/L0", Outcome: Passed}
	ref.Earn()
	assert.Empty(t, ref.Earned, "a reference family is not a model")
}

// The engine and the layout a row ran with are in its text: bytes compare only within them.
func TestDetailsNameEngineAndLayout(t *testing.T) {
	row := Row{Checkpoint: "x", Precision: "bf16", Engine: "regional-compile", Layout: "2 lanes: GPUs 0, 1",
		Settings: &spec.Settings{Size: spec.Size{W: 8, H: 8}, Steps: 2, Seed: 1}}
	var text []string
	for _, d := range details(row) {
		text = append(text, d.Name+": "+d.Text)
	}
	all := strings.Join(text, "\n")
	assert.Contains(t, all, "precision bf16; engine regional-compile")
	assert.Contains(t, all, "layout: 2 lanes: GPUs 0, 1")
	assert.Contains(t, all, "parity: not reported by the server", "an engine row without figures says so")

	row.Parity = &spec.Parity{Served: spec.IsReference, Reference: "eager", CondFP32Reference: 0.0146, CondFP32Served: 0.0146, CondBound: 0.0292,
		FP32Reference: 0.054, FP32Served: 0.054, Bound: 0.108, Passed: true}
	text = nil
	for _, d := range details(row) {
		text = append(text, d.Name+": "+d.Text)
	}
	assert.Contains(t, strings.Join(text, "\n"), "parity: served is the reference (eager); to fp32, served (eager bf16) / bound: cond 0.0146 (0.0146) / 0.0292, guided 0.054 (0.054) / 0.108")

	row.Parity = &spec.Parity{NotChecked: "no step callback"}
	text = nil
	for _, d := range details(row) {
		text = append(text, d.Name+": "+d.Text)
	}
	assert.Contains(t, strings.Join(text, "\n"), "parity: not checked: no step callback", "never figures of zeros or a pass")
}

// Rows qualified with one report directory, written to another, keep their pictures: each is
// copied from its Source. Before, the page showed every picture missing.
func TestWriteFilesElsewhereKeepsPictures(t *testing.T) {
	run := t.TempDir()
	src := filepath.Join(run, "cases", "ref-t2v", "pictures", "latency.png")
	require.NoError(t, WritePNG(src, image.NewRGBA(image.Rect(0, 0, 8, 4))))
	r := Report{Generated: time.Now(), Command: "go test", Rows: []Row{{Checkpoint: "ref-t2v", Outcome: Passed,
		Pictures: []Picture{{Kind: LatencyKind, Title: "latency", Path: "cases/ref-t2v/pictures/latency.png", Source: src}}}}}
	for _, dir := range []string{filepath.Join(t.TempDir(), "elsewhere"), run} {
		paths, err := WriteFiles(dir, r)
		require.NoError(t, err)
		assert.FileExists(t, filepath.Join(dir, "cases", "ref-t2v", "pictures", "latency.png"))
		html, err := os.ReadFile(paths[2])
		require.NoError(t, err)
		assert.Equal(t, 1, strings.Count(string(html), `src="data:image/png;base64,`), dir)
		js, err := os.ReadFile(paths[0])
		require.NoError(t, err)
		assert.NotContains(t, string(js), run+"/cases", "results.json names pictures relative to itself")
	}
	r.Rows[0].Pictures[0].Source = filepath.Join(run, "gone.png")
	_, err := WriteFiles(t.TempDir(), r)
	assert.ErrorContains(t, err, "picture latency")
}

// A report built by hand, with no time or command, says neither; WriteFiles stamps its time.
// Before: it said it was generated at the zero time, by an empty command.
func TestEmptyReportClaimsNoZeroTime(t *testing.T) {
	var md strings.Builder
	require.NoError(t, Markdown(&md, Report{}))
	assert.NotContains(t, md.String(), "Generated")
	dir := t.TempDir()
	before := time.Now()
	paths, err := WriteFiles(dir, Report{})
	require.NoError(t, err)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.NotContains(t, string(b), "0001-01-01", p)
		assert.NotContains(t, string(b), "by ``", p)
		assert.NotContains(t, string(b), "<code></code>", p)
	}
	back, err := ReadReport(paths[0])
	require.NoError(t, err)
	assert.False(t, back.Generated.Before(before.Truncate(time.Second)), "stamped when written")
	md.Reset()
	require.NoError(t, Markdown(&md, Report{Command: "go test ."}))
	assert.Contains(t, md.String(), "Generated by `go test .`.")
}

// A server that measures no accelerator memory (a CPU Task) reports 0: said as not reported.
func TestPeakMemoryZeroIsNotReported(t *testing.T) {
	row := Row{Checkpoint: "ref-t2v", Workload: spec.TextToVideo, Timing: &Timing{Requests: 1}}
	var md strings.Builder
	require.NoError(t, Markdown(&md, Report{Rows: []Row{row}}))
	assert.Contains(t, md.String(), "peak memory not reported")
	assert.NotContains(t, md.String(), "peak memory 0 MB")
	row.Timing.PeakMemoryMB = 41
	md.Reset()
	require.NoError(t, Markdown(&md, Report{Rows: []Row{row}}))
	assert.Contains(t, md.String(), "peak memory 41 MB")
}
