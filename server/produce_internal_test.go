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

// TestHashingWriter: the digest is of exactly the bytes written, though the caller reuses its
// buffer after each Write (as bufio does).
func TestHashingWriter(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	require.NoError(t, err)
	defer f.Close()
	hw := newHashingWriter(f)
	buf := make([]byte, 1000)
	for i := range 300 {
		for j := range buf {
			buf[j] = byte(i + j)
		}
		_, err := hw.Write(buf[:i+1])
		require.NoError(t, err)
	}
	sha, n := hw.sum()
	file, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	sum := sha256.Sum256(file)
	require.Equal(t, int64(len(file)), n)
	require.Equal(t, hex.EncodeToString(sum[:]), sha)
}

// TestWritePNGDigest: writePNG's digest and size are those of the file it leaves.
func TestWritePNGDigest(t *testing.T) {
	v := spec.Video{W: 301, H: 257, N: 1, Pix: make([]byte, 301*257*3)}
	for i := range v.Pix {
		v.Pix[i] = byte(i * 7 / 5)
	}
	path := filepath.Join(t.TempDir(), "a.png")
	sha, n, err := writePNG(path, v)
	require.NoError(t, err)
	want, size, err := digestFile(path)
	require.NoError(t, err)
	require.Equal(t, want, sha)
	require.Equal(t, size, n)
}
