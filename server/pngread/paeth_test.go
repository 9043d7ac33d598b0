package pngread

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPaethMatchesGo holds paeth3 and paeth4 (assembly on amd64) to the Go loops, byte for
// byte, over every row length up to 70 pixels and rows of extremes, random bytes and
// gradients (which make the predictor's ties common), whole rows and spans that continue one.
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
				want := make([]byte, bpp*n)
				paethGo := map[int]func(cur, prev, src []byte, from int){3: paeth3Go, 4: paeth4Go}[bpp]
				paethNow := map[int]func(cur, prev, src []byte, from int){3: paeth3, 4: paeth4}[bpp]
				paethGo(want, prev, src, 0)
				// A span from a pixel boundary, the row's left part decoded already (the
				// parallel unfilter's segments), must continue the row exactly.
				for _, from := range []int{0, 1, n / 2, n - 1} {
					if from < 0 || from > n || (from == 1 && n < 2) {
						continue
					}
					for impl, paeth := range map[string]func(cur, prev, src []byte, from int){"go": paethGo, "now": paethNow} {
						got := make([]byte, bpp*n+4)
						copy(got, want[:bpp*from])
						copy(got[bpp*n:], []byte{1, 2, 3, 4}) // a guard past the row
						paeth(got[:bpp*n], prev, src, bpp*from)
						require.Equal(t, want, got[:bpp*n], "%s: %s, %d pixels from %d, %d bytes a pixel", impl, name, n, from, bpp)
						require.Equal(t, []byte{1, 2, 3, 4}, got[bpp*n:], "%s: %s, %d pixels, %d bytes a pixel: wrote past the row", impl, name, n, bpp)
					}
				}
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
			paeth3Go(cur, prev, src, 0)
		}
	})
	b.Run("now", func(b *testing.B) {
		for b.Loop() {
			paeth3(cur, prev, src, 0)
		}
	})
}
