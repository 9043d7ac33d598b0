package encode_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/media"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server/encode"
)

func video(t testing.TB, n, w, h int) spec.Video {
	v, err := spec.PackRGBA(frames(n, w, h))
	require.NoError(t, err)
	return v
}

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
		require.NoError(t, encode.MP4(context.Background(), path, video(t, tc.n, tc.w, tc.h), tc.fps))
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
	fr := video(t, 9, 64, 64)
	a, b := filepath.Join(dir, "a.mp4"), filepath.Join(dir, "b.mp4")
	require.NoError(t, encode.MP4(context.Background(), a, fr, 16))
	require.NoError(t, encode.MP4(context.Background(), b, fr, 16))
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	assert.Equal(t, ab, bb)
}

func TestMP4RejectsBadInput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.mp4")
	assert.ErrorContains(t, encode.MP4(context.Background(), path, spec.Video{}, 16), "video of 0 frames")
	assert.ErrorContains(t, encode.MP4(context.Background(), path, video(t, 2, 63, 64), 16), "not even")
	short := video(t, 2, 64, 64)
	short.Pix = short.Pix[:len(short.Pix)-3]
	assert.ErrorContains(t, encode.MP4(context.Background(), path, short, 16), "needs 24576 rgb24 bytes")
	_, err := os.Stat(path)
	assert.True(t, os.IsNotExist(err))
}

// An encoder started before its frames writes MP4's bytes; one that is aborted, handed the
// wrong clip or whose context ends leaves no file behind.
func TestStartedMP4(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	fr := video(t, 9, 64, 64)
	want := filepath.Join(dir, "want.mp4")
	require.NoError(t, encode.MP4(ctx, want, fr, 16))

	got := filepath.Join(dir, "got.mp4")
	e, err := encode.StartMP4(ctx, got, 64, 64, 16)
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond) // as beside a Task: ffmpeg is up and waiting
	require.NoError(t, e.Encode(fr))
	wb, _ := os.ReadFile(want)
	gb, _ := os.ReadFile(got)
	assert.Equal(t, wb, gb)

	e, err = encode.StartMP4(ctx, filepath.Join(dir, "aborted.mp4"), 64, 64, 16)
	require.NoError(t, err)
	e.Abort()

	e, err = encode.StartMP4(ctx, filepath.Join(dir, "wrong.mp4"), 64, 64, 16)
	require.NoError(t, err)
	assert.ErrorContains(t, e.Encode(video(t, 9, 48, 64)), "started for 64x64, got 48x64x9")

	cctx, cancel := context.WithCancel(ctx)
	e, err = encode.StartMP4(cctx, filepath.Join(dir, "cancelled.mp4"), 64, 64, 16)
	require.NoError(t, err)
	cancel()
	assert.Error(t, e.Encode(fr))

	_, err = encode.StartMP4(ctx, filepath.Join(dir, "odd.mp4"), 63, 64, 16)
	assert.ErrorContains(t, err, "not even")
	_, err = encode.StartMP4(ctx, filepath.Join(dir, "nofps.mp4"), 64, 64, 0)
	assert.ErrorContains(t, err, "fps 0")

	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, f := range left {
		names = append(names, f.Name())
	}
	assert.ElementsMatch(t, []string{"want.mp4", "got.mp4"}, names, "no partial or temporary file is left")
}

// TestPNGRoundTrip decodes our PNG writer's output with image/png and with ffmpeg: every
// pixel must come back, also where the rows are compressed as several strips (the taller
// case, whose last strip is short), and the bytes must not depend on the cores used.
func TestPNGRoundTrip(t *testing.T) {
	for _, sz := range []struct{ w, h int }{{40, 30}, {1000, 300}} {
		t.Run(fmt.Sprintf("%dx%d", sz.w, sz.h), func(t *testing.T) {
			img := frames(1, sz.w, sz.h)[0]
			v := video(t, 1, sz.w, sz.h)
			var buf bytes.Buffer
			require.NoError(t, encode.PNG(&buf, v))
			back, err := png.Decode(bytes.NewReader(buf.Bytes()))
			require.NoError(t, err)
			assert.Equal(t, img.Bounds(), back.Bounds())
			assert.Equal(t, img.Pix, media.ToRGBA(back).Pix)

			path := filepath.Join(t.TempDir(), "x.png")
			require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
			viaFFmpeg, err := media.DecodeFrames(context.Background(), path)
			require.NoError(t, err)
			require.Len(t, viaFFmpeg, 1)
			assert.Equal(t, img.Pix, viaFFmpeg[0].Pix)

			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			var again bytes.Buffer
			require.NoError(t, encode.PNG(&again, v))
			assert.Equal(t, buf.Bytes(), again.Bytes(), "deterministic, on one core too")
		})
	}
}

func TestFramesSHA256IsOverRGBA(t *testing.T) {
	fr := frames(3, 10, 4)
	h := sha256.New()
	for _, f := range fr {
		h.Write(f.Pix)
	}
	assert.Equal(t, hex.EncodeToString(h.Sum(nil)), encode.FramesSHA256(video(t, 3, 10, 4)))
}

// TestMP4FromRGB24 checks the encoder reads rgb24 in the right channel order: a saturated
// red clip must decode red.
func TestMP4FromRGB24(t *testing.T) {
	v := spec.Video{W: 32, H: 32, N: 3}
	for i := 0; i < v.N*v.W*v.H; i++ {
		v.Pix = append(v.Pix, 220, 20, 30)
	}
	path := filepath.Join(t.TempDir(), "red.mp4")
	require.NoError(t, encode.MP4(context.Background(), path, v, 8))
	got, err := media.DecodeFrames(context.Background(), path)
	require.NoError(t, err)
	require.Len(t, got, 3)
	c := got[1].RGBAAt(16, 16)
	assert.InDelta(t, 220, int(c.R), 6)
	assert.InDelta(t, 20, int(c.G), 6)
	assert.InDelta(t, 30, int(c.B), 6)
}

// TestStreamedMP4: a clip streamed in uneven chunks (a byte, a frame and a half, ...), with
// the rest given to Encode, is MP4's file byte for byte, with the clip's frames digest; so is
// one streamed whole, and one streamed while ffmpeg is stopped, which shows Stream does not
// wait for the encoder.
func TestStreamedMP4(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context() // its end kills an ffmpeg a failed test left stopped
	v := video(t, 17, 64, 48)
	want := filepath.Join(dir, "want.mp4")
	require.NoError(t, encode.MP4(ctx, want, v, 16))
	wb, err := os.ReadFile(want)
	require.NoError(t, err)

	fb := v.FrameBytes()
	for name, cuts := range map[string][]int{
		"uneven":     {1, 1000, fb + fb/2, 4 * fb, 13*fb - 7, 13 * fb}, // the last 4 frames left to Encode
		"whole":      {len(v.Pix)},
		"frame-wise": {fb, 2 * fb, 3 * fb, 4 * fb, 5 * fb, 6 * fb, 7 * fb, 8 * fb, 9 * fb},
	} {
		t.Run(name, func(t *testing.T) {
			got := filepath.Join(t.TempDir(), "got.mp4")
			e, err := encode.StartMP4(ctx, got, v.W, v.H, 16)
			require.NoError(t, err)
			prev := 0
			for _, c := range cuts {
				e.Stream(v.Pix[prev:c])
				prev = c
				time.Sleep(time.Millisecond) // as a decode would: the queue drains meanwhile
			}
			assert.Equal(t, prev, e.Streamed())
			require.True(t, e.Fits(v))
			require.NoError(t, e.Encode(v))
			gb, err := os.ReadFile(got)
			require.NoError(t, err)
			assert.Equal(t, wb, gb)
			// The digest made while streaming (chunks ending inside a pixel included) is the
			// clip's; one byte changed gives another.
			assert.Equal(t, encode.FramesSHA256(v), e.FramesSHA256())
			other := spec.Video{W: v.W, H: v.H, N: v.N, Pix: bytes.Clone(v.Pix)}
			other.Pix[len(other.Pix)/2] ^= 1
			assert.NotEqual(t, encode.FramesSHA256(other), e.FramesSHA256())
		})
	}

	t.Run("ffmpeg stopped", func(t *testing.T) {
		big := synthetic("noise", 9, 640, 480) // 8 MB, far beyond a pipe's buffer
		bigWant := filepath.Join(dir, "big.mp4")
		require.NoError(t, encode.MP4(ctx, bigWant, big, 16))
		got := filepath.Join(t.TempDir(), "got.mp4")
		e, err := encode.StartMP4(ctx, got, big.W, big.H, 16)
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(encode.PID(e), syscall.SIGSTOP))
		streamed := make(chan struct{})
		go func() {
			for i := range big.N - 1 {
				e.Stream(big.Frame(i))
			}
			close(streamed)
		}()
		select {
		case <-streamed:
		case <-time.After(10 * time.Second):
			t.Fatal("Stream waited for the stopped encoder")
		}
		require.NoError(t, syscall.Kill(encode.PID(e), syscall.SIGCONT))
		require.NoError(t, e.Encode(big))
		wb, _ := os.ReadFile(bigWant)
		gb, _ := os.ReadFile(got)
		assert.True(t, bytes.Equal(wb, gb), "streamed while stopped: %d bytes, want %d", len(gb), len(wb))
		assert.Equal(t, encode.FramesSHA256(big), e.FramesSHA256())
	})
}

// TestStreamedMP4Fits: once frames were streamed, only the buffer they came from, at least as
// long as what was streamed, fits; a copy, a shortened clip or chunks that do not follow
// each other are refused, and Encode of a refused clip leaves no file.
func TestStreamedMP4Fits(t *testing.T) {
	ctx := t.Context() // its end kills an ffmpeg a failed test left stopped
	v := video(t, 9, 64, 48)
	fb := v.FrameBytes()
	start := func(t *testing.T) (*encode.MP4Encoder, string) {
		path := filepath.Join(t.TempDir(), "clip.mp4")
		e, err := encode.StartMP4(ctx, path, v.W, v.H, 16)
		require.NoError(t, err)
		return e, path
	}
	shortened := func(n int) spec.Video { return spec.Video{W: v.W, H: v.H, N: n, Pix: v.Pix[:n*fb]} }

	e, path := start(t)
	e.Stream(v.Pix[:5*fb])
	assert.True(t, e.Fits(v))
	assert.True(t, e.Fits(shortened(5)), "what was streamed, exactly")
	assert.True(t, e.Fits(shortened(7)))
	assert.False(t, e.Fits(shortened(4)), "shorter than what was streamed")
	cp := v
	cp.Pix = append([]byte(nil), v.Pix...)
	assert.False(t, e.Fits(cp), "a copy of the buffer")
	assert.False(t, e.Fits(video(t, 9, 48, 48)), "another size")
	assert.ErrorContains(t, e.Encode(cp), "streamed from another buffer")
	assertNoFile(t, path)

	e, path = start(t)
	e.Stream(v.Pix[:3*fb])
	assert.ErrorContains(t, e.Encode(shortened(2)), fmt.Sprintf("%d bytes were streamed, the clip has %d", 3*fb, 2*fb))
	assertNoFile(t, path)

	e, path = start(t)
	e.Stream(v.Pix[:fb])
	e.Stream(v.Pix[2*fb : 3*fb]) // skips a frame
	assert.False(t, e.Fits(v))
	assert.ErrorContains(t, e.Encode(v), "not consecutive runs of one buffer")
	assertNoFile(t, path)

	e, path = start(t)
	e.Stream(v.Pix[:fb])
	e.Stream(cp.Pix[fb : 2*fb]) // the next bytes, but of another buffer
	assert.False(t, e.Fits(v))
	e.Abort()
	assertNoFile(t, path)
}

// TestStreamedMP4Abort: aborting an encoder with chunks still queued (its ffmpeg stopped, so
// none can be written) leaves no file and no goroutine; so does a cancelled context.
func TestStreamedMP4Abort(t *testing.T) {
	ctx := t.Context() // its end kills an ffmpeg a failed test left stopped
	v := synthetic("noise", 9, 640, 480)
	path := filepath.Join(t.TempDir(), "clip.mp4")
	before := writers()
	e, err := encode.StartMP4(ctx, path, v.W, v.H, 16)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return writers() == before+1 }, 5*time.Second, time.Millisecond, "the encoder's writer runs")
	require.NoError(t, syscall.Kill(encode.PID(e), syscall.SIGSTOP))
	for i := range v.N {
		e.Stream(v.Frame(i))
	}
	e.Abort()
	e.Stream(v.Frame(0)) // too late: ignored
	assertNoFile(t, path)
	require.Eventually(t, func() bool { return writers() == before }, 5*time.Second, 5*time.Millisecond, "the writer goroutine ended")

	cctx, cancel := context.WithCancel(ctx)
	e, err = encode.StartMP4(cctx, path, v.W, v.H, 16)
	require.NoError(t, err)
	for i := range v.N - 2 {
		e.Stream(v.Frame(i))
	}
	cancel()
	assert.ErrorContains(t, e.Encode(v), "encode: ffmpeg")
	assertNoFile(t, path)
	require.Eventually(t, func() bool { return writers() == before }, 5*time.Second, 5*time.Millisecond, "the writer goroutine ended")
}

// writers counts the encoder goroutines that feed ffmpeg.
func writers() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "encode.(*MP4Encoder).write(")
}

func assertNoFile(t *testing.T, path string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	var names []string
	for _, f := range entries {
		names = append(names, f.Name())
	}
	assert.Empty(t, names, "no artifact or temporary file")
}
