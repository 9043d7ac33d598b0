package reports

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The rows that ran come first, then those that did not (not run, excluded), each by
// checkpoint: a CPU run's report opened at the top of the three reference rows, not below
// six GPU and excluded rows whose ids happen to sort first (issue #28).
func TestRowsThatRanComeFirst(t *testing.T) {
	r := Report{Rows: []Row{
		{Checkpoint: "ref-t2v", Outcome: Passed},
		{Checkpoint: "Wan-AI/Wan2.1-T2V-1.3B", Outcome: NotRun},
		{Checkpoint: "ref-edit", Outcome: Failed},
		{Checkpoint: "Lightricks/LTX-Video", Outcome: Excluded},
		{Checkpoint: "ref-t2i", Outcome: GapDetected},
		{Checkpoint: "MiniMaxAI/MiniMax-H3", Outcome: Interrupted},
	}}
	want := []string{"MiniMaxAI/MiniMax-H3", "ref-edit", "ref-t2i", "ref-t2v", "Lightricks/LTX-Video", "Wan-AI/Wan2.1-T2V-1.3B"}
	dir := t.TempDir()
	_, err := WriteFiles(dir, r)
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	var got Report
	require.NoError(t, json.Unmarshal(b, &got))
	var ids []string
	for _, row := range got.Rows {
		ids = append(ids, row.Checkpoint)
	}
	assert.Equal(t, want, ids, "results.json")

	a, b2 := Report{Rows: r.Rows[:3]}, Report{Rows: r.Rows[3:]}
	m, err := Merge(a, b2)
	require.NoError(t, err)
	ids = ids[:0]
	for _, row := range m.Rows {
		ids = append(ids, row.Checkpoint)
	}
	assert.Equal(t, want, ids, "merged")
}
