package reports

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A row's recorded paths under the staging directory (the AIPerf command's files) name their
// place in the report directory the staging one becomes, given relative or absolute.
func TestMovedNamesTheFinalPlace(t *testing.T) {
	abs, err := filepath.Abs(".out.run-1")
	require.NoError(t, err)
	rows := []Row{{AIPerfCommand: "aiperf --input-file " + abs + "/cases/a/in.jsonl --artifact-dir .out.run-1/cases/a/aiperf",
		Stages: []Stage{{Message: `kept "` + abs + `/cases/a"`}}}}
	shown, err := Moved(rows, ".out.run-1", ".out")
	require.NoError(t, err)
	want, _ := filepath.Abs(".out")
	assert.Equal(t, "aiperf --input-file "+want+"/cases/a/in.jsonl --artifact-dir .out/cases/a/aiperf", shown[0].AIPerfCommand)
	assert.Equal(t, `kept "`+want+`/cases/a"`, shown[0].Stages[0].Message)
	assert.Contains(t, rows[0].AIPerfCommand, ".run-1", "the rows themselves are left as they were")
}
