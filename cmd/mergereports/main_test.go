package main

import (
	"bytes"
	"image"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/internal/cmdtest"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/reports"
)

func TestMain(m *testing.M) { cmdtest.Main(m, main) }

func TestHelpAndUsageErrors(t *testing.T) {
	cmdtest.AssertHelp(t, "-out DIR")
	r := cmdtest.Run(t, []string{"-out", "merged"})
	assert.Equal(t, 2, r.Code, "a merge of no shards")
	assert.Contains(t, r.Stderr, "need -out and at least one results.json")
	assert.Empty(t, r.Left)
}

// shard writes a shard's report directory with one row and its contact sheet.
func shard(t *testing.T, id string, at time.Time) string {
	dir := t.TempDir()
	frame := image.NewRGBA(image.Rect(0, 0, 32, 16))
	sheet, err := reports.ContactSheet([]*image.RGBA{frame, frame, frame}, 3)
	require.NoError(t, err)
	require.NoError(t, reports.WritePNG(filepath.Join(dir, "cases", id, "contact-sheet.png"), sheet))
	r := reports.Report{Generated: at, Command: "go test -run " + id + " .",
		Rows: []reports.Row{{Checkpoint: id, Profile: "reference/L0", Label: reports.Label("reference/L0"), Outcome: reports.Passed,
			Pictures: []reports.Picture{{Kind: reports.ContactSheetKind, Title: "contact sheet " + id, Path: "cases/" + id + "/contact-sheet.png"}}}},
		Inventory: []spec.Entry{{Checkpoint: spec.Checkpoint{ID: "ref-t2v"}}, {Checkpoint: spec.Checkpoint{ID: "ref-edit"}}},
	}
	_, err = reports.WriteFiles(dir, r)
	require.NoError(t, err)
	return filepath.Join(dir, "results.json")
}

func TestMergeReportsCommand(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	a, b := shard(t, "ref-t2v", t0), shard(t, "ref-edit", t0.Add(time.Minute))
	out := filepath.Join(t.TempDir(), "merged")
	var stdout, stderr bytes.Buffer
	require.NoError(t, run([]string{"-out", out, a, b}, &stdout, &stderr), stderr.String())
	for _, f := range []string{"results.json", "results.md", "index.html", "cases/ref-t2v/contact-sheet.png", "cases/ref-edit/contact-sheet.png"} {
		assert.FileExists(t, filepath.Join(out, f))
	}
	assert.Contains(t, stdout.String(), "report: "+filepath.Join(out, "index.html"))
	m, err := reports.ReadReport(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	assert.Len(t, m.Rows, 2)
	assert.Equal(t, t0.Add(time.Minute), m.Generated.UTC())
	html, err := os.ReadFile(filepath.Join(out, "index.html"))
	require.NoError(t, err)
	assert.Equal(t, 2, bytes.Count(html, []byte(`src="data:image/png;base64,`)))

	assert.Error(t, run([]string{a}, &stdout, &stderr), "-out is required")
	assert.Contains(t, stderr.String(), "usage: go run ./cmd/mergereports -out DIR")
	assert.ErrorContains(t, run([]string{"-out", out, a, a + ".missing"}, &stdout, &stderr), "no such file")
}
