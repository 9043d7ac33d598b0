package server

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/spec"
)

// TestEncodePNG: with a path, the digest and size are those of the file it leaves (and no
// temporary file stays); without one, the same bytes are returned and no file is written.
func TestEncodePNG(t *testing.T) {
	v := spec.Video{W: 301, H: 257, N: 1, Pix: make([]byte, 301*257*3)}
	for i := range v.Pix {
		v.Pix[i] = byte(i * 7 / 5)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "a.png")
	sha, n, inline, err := encodePNG(path, v)
	require.NoError(t, err)
	require.Nil(t, inline, "a file's bytes are not kept in memory too")
	want, size, err := digestFile(path)
	require.NoError(t, err)
	require.Equal(t, want, sha)
	require.Equal(t, size, n)

	sha2, n2, inline, err := encodePNG("", v)
	require.NoError(t, err)
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, file, inline, "inline, the very bytes the file holds")
	sum := sha256.Sum256(inline)
	require.Equal(t, hex.EncodeToString(sum[:]), sha2)
	require.Equal(t, n, n2)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "only a.png: no temporary file, nothing written for the inline one")
}
