package reports

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A malformed results.json is skipped with its error; the other runs' rows are still read.
func TestPublishedSkipsAMalformedRun(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"bad":  `{"rows": [`,
		"good": `{"rows": [{"checkpoint": "x", "profile": "full"}]}`,
	} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, name), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name, "results.json"), []byte(body), 0o644))
	}
	rows, from, skipped, err := Published(dir)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	assert.Equal(t, "x", rows[0].Checkpoint)
	assert.Equal(t, filepath.Join(dir, "good", "results.json"), from[0])
	require.Len(t, skipped, 1)
	assert.Contains(t, skipped[0], filepath.Join(dir, "bad", "results.json"))
}

// The runs published in this tree all parse: a skip is for someone else's tree, not ours.
func TestEveryPublishedRunParses(t *testing.T) {
	rows, _, skipped, err := Published("published")
	require.NoError(t, err)
	assert.Empty(t, skipped)
	assert.NotEmpty(t, rows)
}
