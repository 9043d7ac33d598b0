package bundle_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/bundle"
	"github.com/mediaqual/mediaqual/models/spec"
)

const commitA = "6f3ccc0b56e431dc6a0c2b2039706d7d26f22cb9"

func write(t *testing.T, path, body string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
}

// hfMetadata writes what huggingface_hub's write_download_metadata leaves for one file of a
// `hf download --local-dir` (commit hash, etag, timestamp; one a line).
func hfMetadata(t *testing.T, dir, file, commit string) {
	write(t, filepath.Join(dir, ".cache", "huggingface", "download", file+".metadata"), commit+"\n0a1b2c\n1712656091.123\n")
}

func TestRevisionFromTheHuggingFaceMetadata(t *testing.T) {
	dir := t.TempDir()
	c, _, err := bundle.Revision(dir)
	require.NoError(t, err)
	assert.Empty(t, c, "a bundle with no metadata states no revision")

	write(t, filepath.Join(dir, "model_index.json"), "{}")
	hfMetadata(t, dir, "model_index.json", commitA)
	hfMetadata(t, dir, "transformer/config.json", commitA)
	c, src, err := bundle.Revision(dir)
	require.NoError(t, err)
	assert.Equal(t, commitA, c)
	assert.Contains(t, src, ".cache/huggingface/download/")

	write(t, filepath.Join(dir, bundle.RevisionFile), commitA+"\n")
	c, _, err = bundle.Revision(dir)
	require.NoError(t, err)
	assert.Equal(t, commitA, c, "the documented file agrees")

	hfMetadata(t, dir, "vae/config.json", "921dbaf3"+commitA[8:])
	_, _, err = bundle.Revision(dir)
	assert.ErrorContains(t, err, "states 2 revisions", "a bundle mixed from two revisions")

	only := t.TempDir()
	write(t, filepath.Join(only, bundle.RevisionFile), "main\n")
	_, _, err = bundle.Revision(only)
	assert.ErrorContains(t, err, `"main"`, "a branch name is not a revision")
}

func TestMatches(t *testing.T) {
	assert.True(t, bundle.Matches(commitA, commitA))
	assert.True(t, bundle.Matches("6f3ccc0b", commitA))
	assert.False(t, bundle.Matches("6f3ccc0c", commitA))
	assert.False(t, bundle.Matches("", commitA))
	assert.False(t, bundle.Matches("6f3", commitA))
}

func TestDigestLeavesOutBookkeeping(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		write(t, filepath.Join(d, "model_index.json"), "{}")
		write(t, filepath.Join(d, "vae", "w.safetensors"), "weights")
	}
	hfMetadata(t, a, "model_index.json", commitA)
	write(t, filepath.Join(b, spec.ReferenceOutputsDir, "prompt-0.mp4"), "x")
	da, n, size, err := bundle.Digest(a)
	require.NoError(t, err)
	db, _, _, err := bundle.Digest(b)
	require.NoError(t, err)
	assert.Equal(t, da, db, "two downloads of one revision hash alike")
	assert.Equal(t, 2, n)
	assert.EqualValues(t, 9, size)
	write(t, filepath.Join(b, "vae", "w.safetensors"), "other weights")
	db, _, _, err = bundle.Digest(b)
	require.NoError(t, err)
	assert.NotEqual(t, da, db)
}

func TestLoadTimeout(t *testing.T) {
	root := t.TempDir()
	t.Setenv(bundle.EnvRoot, root)
	t.Setenv(bundle.EnvLoadTimeout, "")
	e := spec.Entry{Bundle: "org/model"}
	d, from, err := bundle.LoadTimeout(e)
	require.NoError(t, err)
	assert.Equal(t, bundle.DefaultLoadTimeout, d, "no bundle: the default")
	assert.Equal(t, "the default", from)

	write(t, filepath.Join(root, "org/model/w.bin"), string(make([]byte, 1000)))
	d, from, err = bundle.LoadTimeout(e)
	require.NoError(t, err)
	assert.Equal(t, bundle.LoadStartup, d, "1 kB reads in no time")
	assert.Contains(t, from, "MB/s")

	e.LoadTimeout = 42 * time.Minute
	d, from, _ = bundle.LoadTimeout(e)
	assert.Equal(t, 42*time.Minute, d)
	assert.Equal(t, "the row's LoadTimeout", from)

	t.Setenv(bundle.EnvLoadTimeout, "3h")
	d, from, _ = bundle.LoadTimeout(e)
	assert.Equal(t, 3*time.Hour, d)
	assert.Equal(t, bundle.EnvLoadTimeout, from)
	t.Setenv(bundle.EnvLoadTimeout, "soon")
	_, _, err = bundle.LoadTimeout(e)
	assert.ErrorContains(t, err, "MEDIAQUAL_LOAD_TIMEOUT")
	assert.Contains(t, bundle.RaiseHint(time.Minute, "the default"), "MEDIAQUAL_LOAD_TIMEOUT=2m0s")
}

// A bundle that is not there is said to be missing, not to state no revision.
func TestRevisionOfAMissingBundle(t *testing.T) {
	_, _, err := bundle.Revision(filepath.Join(t.TempDir(), "absent"))
	assert.ErrorContains(t, err, "no bundle directory at")
}
