package spec

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The plain loop PackRGB must agree with.
func packRGBRef(dst, src []byte) {
	for s, d := 0, 0; s+3 < len(src); s, d = s+4, d+3 {
		dst[d], dst[d+1], dst[d+2] = src[s], src[s+1], src[s+2]
	}
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestPackRGB: every pixel count from 0 to 40 (the four-pixel blocks and each tail),
// with a byte or two left over, and bytes beyond the pixels in dst left alone.
func TestPackRGB(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for px := range 41 {
		for extra := range 3 {
			rgba := randomBytes(r, 4*px+extra)
			want := randomBytes(r, 3*px+5)
			got := bytes.Clone(want)
			packRGBRef(want, rgba)
			PackRGB(got, rgba)
			require.Equal(t, want, got, "PackRGB, %d pixels + %d bytes", px, extra)
		}
	}
	rgb := randomBytes(r, 3*64)
	back := make([]byte, len(rgb))
	rgba := make([]byte, 4*64)
	ExpandRGB(rgba, rgb)
	PackRGB(back, rgba)
	assert.Equal(t, rgb, back, "a round trip")
	assert.Panics(t, func() { PackRGB(make([]byte, 11), make([]byte, 16)) }, "a short dst is not written past")
}

// BenchmarkPackRGB: a 1024² frame, PackRGB beside the plain loop.
func BenchmarkPackRGB(b *testing.B) {
	src, dst := make([]byte, 4*1024*1024), make([]byte, 3*1024*1024)
	for _, f := range []struct {
		name string
		pack func(dst, src []byte)
	}{{"words", PackRGB}, {"byte-loop", packRGBRef}} {
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				f.pack(dst, src)
			}
		})
	}
}
