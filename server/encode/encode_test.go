package encode_test

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"mediaqual/harness/media"
	"mediaqual/server/encode"
)

func frames(n, w, h int) []*image.RGBA {
	out := make([]*image.RGBA, n)
	for i := range out {
		f := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				f.SetRGBA(x, y, color.RGBA{uint8(x + 7*i), uint8(y), uint8(3 * i), 255})
			}
		}
		out[i] = f
	}
	return out
}

func TestMP4MatchesFFprobe(t *testing.T) {
	for _, tc := range []struct{ n, w, h, fps int }{
		{17, 320, 192, 16}, {5, 64, 48, 8}, {33, 160, 96, 24}, {1, 32, 32, 30},
	} {
		path := filepath.Join(t.TempDir(), "clip.mp4")
		require.NoError(t, encode.MP4(context.Background(), path, frames(tc.n, tc.w, tc.h), tc.fps))
		p, err := media.FFprobe(context.Background(), path)
		require.NoError(t, err)
		assert.Equal(t, "h264", p.Codec)
		assert.Equal(t, "yuv420p", p.PixFmt)
		assert.Equal(t, tc.n, p.Frames)
		assert.Equal(t, [2]int{tc.w, tc.h}, [2]int{p.Width, p.Height})
		assert.Equal(t, int64(tc.fps), p.FPS.Num().Int64())
		assert.InDelta(t, float64(tc.n)/float64(tc.fps), p.DurationS, 1e-6)
		entries, _ := os.ReadDir(filepath.Dir(path))
		assert.Len(t, entries, 1, "no temporary file left beside the artifact")
	}
}

func TestMP4Deterministic(t *testing.T) {
	dir := t.TempDir()
	fr := frames(9, 64, 64)
	a, b := filepath.Join(dir, "a.mp4"), filepath.Join(dir, "b.mp4")
	require.NoError(t, encode.MP4(context.Background(), a, fr, 16))
	require.NoError(t, encode.MP4(context.Background(), b, fr, 16))
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	assert.Equal(t, ab, bb)
}

func TestMP4RejectsBadInput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.mp4")
	assert.ErrorContains(t, encode.MP4(context.Background(), path, nil, 16), "no frames")
	assert.ErrorContains(t, encode.MP4(context.Background(), path, frames(2, 63, 64), 16), "not even")
	mixed := append(frames(1, 64, 64), frames(1, 32, 32)...)
	assert.ErrorContains(t, encode.MP4(context.Background(), path, mixed, 16), "frame 1")
	_, err := os.Stat(path)
	assert.True(t, os.IsNotExist(err))
}

func TestPNGRoundTrip(t *testing.T) {
	img := frames(1, 40, 30)[0]
	var buf bytes.Buffer
	require.NoError(t, encode.PNG(&buf, img))
	back, err := png.Decode(&buf)
	require.NoError(t, err)
	assert.Equal(t, img.Bounds(), back.Bounds())
	r, g, b, a := back.At(5, 7).RGBA()
	assert.Equal(t, img.RGBAAt(5, 7), color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)})
}
