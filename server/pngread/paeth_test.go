package pngread

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPaethMatchesGo holds paeth3 and paeth4 (assembly on amd64) to the Go loops, byte for
// byte, over every row length up to 70 pixels and rows of extremes, random bytes and
// gradients (which make the predictor's ties common).
func TestPaethMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	fills := map[string]func(i int) byte{
		"random":   func(int) byte { return byte(r.Uint32()) },
		"extremes": func(int) byte { return []byte{0, 255}[r.IntN(2)] },
		"gradient": func(i int) byte { return byte(i / 5) },
		"ties":     func(i int) byte { return byte(r.IntN(3)) },
	}
	for name, fill := range fills {
		for n := 0; n <= 70; n++ {
			for _, bpp := range []int{3, 4} {
				prev, src := make([]byte, bpp*n), make([]byte, bpp*n)
				for i := range prev {
					prev[i] = fill(i)
				}
				for i := range src {
					src[i] = fill(i)
				}
				want, got := make([]byte, bpp*n), make([]byte, bpp*n+4)
				copy(got[bpp*n:], []byte{1, 2, 3, 4}) // a guard past the row
				if bpp == 3 {
					paeth3Go(want, prev, src)
					paeth3(got[:bpp*n], prev, src)
				} else {
					paeth4Go(want, prev, src)
					paeth4(got[:bpp*n], prev, src)
				}
				require.Equal(t, want, got[:bpp*n], "%s, %d pixels, %d bytes a pixel", name, n, bpp)
				require.Equal(t, []byte{1, 2, 3, 4}, got[bpp*n:], "%s, %d pixels, %d bytes a pixel: wrote past the row", name, n, bpp)
			}
		}
	}
}

// BenchmarkPaeth unfilters a 1024-pixel RGB row (the edit's reference width).
func BenchmarkPaeth(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	prev, src, cur := make([]byte, 3072), make([]byte, 3072), make([]byte, 3072)
	for i := range prev {
		prev[i] = byte(r.Uint32())
	}
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			paeth3Go(cur, prev, src)
		}
	})
	b.Run("now", func(b *testing.B) {
		for b.Loop() {
			paeth3(cur, prev, src)
		}
	})
}
