package qualify

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/reports"
)

// One malformed results.json among the published runs does not fail a row that another,
// good, published run vouches for: the bad folder is skipped with a note, the good one still
// compared (issue #28 item 2).
func TestCorruptPublishedRunDoesNotFailTheRow(t *testing.T) {
	c := newCase(t, "Qwen/Qwen-Image-Edit-2511")
	c.Config.Root = t.TempDir()
	sum := strings.Repeat("ab", 32)
	published := filepath.Join(c.Config.Root, "reports", "published")
	good := reports.Report{Rows: []reports.Row{{
		Checkpoint: c.Entry.ID, Profile: "full",
		Bundle: map[string]string{"revision": c.Entry.Revision, "sha256": sum[:16]},
	}}}
	b, err := json.Marshal(good)
	require.NoError(t, err)
	for dir, body := range map[string][]byte{
		"a-corrupt": []byte(`{"rows": [{"checkpoint": `), // sorts before the good one
		"b-good":    b,
	} {
		require.NoError(t, os.MkdirAll(filepath.Join(published, dir), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(published, dir, "results.json"), body, 0o644))
	}
	c.Row.Profile = "full"

	msg, err := c.publishedDigest(bundleFacts{Commit: c.Entry.Revision}, sum)
	require.NoError(t, err, "a corrupt published run beside a good one must not fail the row")
	assert.Contains(t, msg, "bundle digest equals "+filepath.Join(published, "b-good", "results.json")+"'s")
	assert.Contains(t, msg, "skipped "+filepath.Join(published, "a-corrupt", "results.json"))

	// The good run still holds the digest: another bundle fails against it.
	_, err = c.publishedDigest(bundleFacts{Commit: c.Entry.Revision}, strings.Repeat("cd", 32))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bundle-digest")
}
