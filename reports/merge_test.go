package reports

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/spec"
)

func shards() (Report, Report) {
	a, b := sample(), sample()
	a.Rows, b.Rows = a.Rows[:2], a.Rows[2:] // ref-t2v, Wan2.1 | ref-t2i
	a.Command, b.Command = "go test -run 'Ref_t2v|Wan' .", "go test -run Ref_t2i ."
	b.Generated = a.Generated.Add(time.Hour)
	return a, b
}

func TestMergeCombinesShards(t *testing.T) {
	a, b := shards()
	m, err := Merge(a, b)
	require.NoError(t, err)
	var ids []string
	for _, r := range m.Rows {
		ids = append(ids, r.Checkpoint)
	}
	assert.Equal(t, []string{"ref-t2i", "ref-t2v", "Wan-AI/Wan2.1-T2V-1.3B"}, ids, "every shard's rows, sorted: those that ran first")
	assert.Equal(t, b.Generated, m.Generated, "the latest")
	assert.Equal(t, "merged from 2 shards: go test -run 'Ref_t2v|Wan' .; go test -run Ref_t2i .", m.Command)
	assert.Equal(t, a.Inventory, m.Inventory)

	// The same row in two shards, identical, appears once.
	m, err = Merge(a, b, a)
	require.NoError(t, err)
	assert.Len(t, m.Rows, 3)
	assert.Contains(t, m.Command, "merged from 3 shards")
}

func TestMergeRefusesConflictingRows(t *testing.T) {
	a, b := shards()
	dup := a.Rows[0]
	dup.Outcome = Failed
	b.Rows = append(b.Rows, dup)
	_, err := Merge(a, b)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "checkpoint ref-t2v is in shard 1 and shard 2 with different results")
}

func TestMergeRefusesDifferentInventories(t *testing.T) {
	a, b := shards()
	b.Inventory = append([]spec.Entry(nil), b.Inventory...)
	b.Inventory[0].Note = "excluded: something else"
	_, err := Merge(a, b)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "shard 2's inventory differs from shard 1's (at nvidia/Cosmos3-Nano)")

	b.Inventory = append(b.Inventory[:0:0], a.Inventory...)
	b.Inventory = append(b.Inventory, spec.Entry{Checkpoint: spec.Checkpoint{ID: "extra"}})
	_, err = Merge(a, b)
	assert.ErrorContains(t, err, "(at extra)")

	_, err = Merge()
	assert.Error(t, err)
}

// writeShard writes r as a shard directory with one picture per row at pic, coloured
// uniqueColour(colour).
func writeShard(t *testing.T, r Report, pic string, colour int) string {
	t.Helper()
	dir := t.TempDir()
	for i := range r.Rows {
		r.Rows[i].Pictures = []Picture{{Kind: LatencyKind, Title: "latency", Path: pic}}
	}
	require.NoError(t, WritePNG(filepath.Join(dir, pic), uniformFrames(colour+1, 4, 4)[colour]))
	b, err := json.Marshal(r)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644))
	return filepath.Join(dir, "results.json")
}

func TestMergeFilesCopiesPicturesAndWritesTheReport(t *testing.T) {
	a, b := shards()
	sa := writeShard(t, a, "cases/latency.png", 0)
	sb := writeShard(t, b, "cases/latency.png", 1) // same path, different file
	same := writeShard(t, a, "cases/latency.png", 0)
	out := t.TempDir()
	paths, err := MergeFiles(out, sa, sb, same)
	require.NoError(t, err)
	require.Len(t, paths, 3)
	for _, p := range paths {
		assert.FileExists(t, p)
	}
	assert.FileExists(t, filepath.Join(out, "cases/latency.png"))
	assert.FileExists(t, filepath.Join(out, "shard-2/cases/latency.png"), "a colliding path is prefixed by its shard")
	assert.NoDirExists(t, filepath.Join(out, "shard-3"), "the same file at the same path is not a collision")

	m, err := ReadReport(paths[0])
	require.NoError(t, err)
	byID := map[string]Row{}
	for _, r := range m.Rows {
		byID[r.Checkpoint] = r
	}
	assert.Equal(t, "cases/latency.png", byID["ref-t2v"].Pictures[0].Path)
	assert.Equal(t, "shard-2/cases/latency.png", byID["ref-t2i"].Pictures[0].Path)
	html, err := os.ReadFile(paths[2])
	require.NoError(t, err)
	assert.NotContains(t, string(html), "picture missing")

	// A shard whose picture leaves its directory is refused.
	bad := writeShard(t, b, "p.png", 2)
	r, err := ReadReport(bad)
	require.NoError(t, err)
	r.Rows[0].Pictures[0].Path = "../p.png"
	j, _ := json.Marshal(r)
	require.NoError(t, os.WriteFile(bad, j, 0o644))
	_, err = MergeFiles(t.TempDir(), sa, bad)
	assert.ErrorContains(t, err, "not inside")
}
