package media

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeFrames(t *testing.T) {
	requireFFmpeg(t)
	dir := t.TempDir()
	ctx := context.Background()
	for _, c := range clipsNamed("x264-64x48-8fps-1f", "x264-320x192-16fps-17f-faststart", "mpeg4-832x480-24fps-49f",
		"x264-320x192-16fps-17f-fragmented", "hevc-64x48-24fps-5f-audio-first", "x264-160x96-10fps-9f-vfr") {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := c.make(t, dir)
			frames, err := DecodeFrames(ctx, path)
			require.NoError(t, err)
			require.Len(t, frames, c.n)
			info, err := ReadMP4File(path)
			require.NoError(t, err)
			require.Equal(t, info.Frames, len(frames), "one decoded frame per sample")
			for _, f := range frames {
				require.Equal(t, image.Rect(0, 0, c.w, c.h), f.Rect)
			}
			d := FrameDigests(frames)
			again, err := DecodeFrames(ctx, path)
			require.NoError(t, err)
			assert.Equal(t, d, FrameDigests(again), "decoding is deterministic")
			if c.n > 1 {
				assert.NotEqual(t, d[0], d[1], "testsrc2 moves")
				m, err := Motion(frames)
				require.NoError(t, err)
				require.Len(t, m, c.n-1)
				for i, v := range m {
					assert.Greater(t, v, 0.1, "motion %d", i)
				}
			}
			assert.False(t, IsBlank(frames[0], 10), "testsrc2 is not blank: %v", ChannelStdDev(frames[0]))
		})
	}
}

// TestDecodeFramesExact checks pixel layout end to end: frames stored losslessly
// (RGB H.264 at qp 0) must decode to exactly the PNGs ffmpeg wrote from the same source.
func TestDecodeFramesExact(t *testing.T) {
	requireFFmpeg(t)
	dir := t.TempDir()
	src := "testsrc2=size=96x64:rate=10"
	ffmpeg(t, "-v", "error", "-f", "lavfi", "-i", src, "-frames:v", "3", filepath.Join(dir, "f%d.png"))
	clip := filepath.Join(dir, "lossless.mp4")
	ffmpeg(t, "-v", "error", "-f", "lavfi", "-i", src, "-frames:v", "3", "-c:v", "libx264rgb", "-qp", "0", "-pix_fmt", "rgb24", clip)
	frames, err := DecodeFrames(context.Background(), clip)
	require.NoError(t, err)
	require.Len(t, frames, 3)
	var stills []*image.RGBA
	for i := range 3 {
		img, err := DecodeImage(filepath.Join(dir, fmt.Sprintf("f%d.png", i+1)))
		require.NoError(t, err)
		stills = append(stills, ToRGBA(img))
		mad, err := MeanAbsDiff(frames[i], img)
		require.NoError(t, err)
		assert.Zero(t, mad, "frame %d", i)
	}
	assert.Equal(t, FrameDigests(stills), FrameDigests(frames))
}

// TestDecodeFramesStatic: a flat clip is blank and still.
func TestDecodeFramesStatic(t *testing.T) {
	requireFFmpeg(t)
	path := filepath.Join(t.TempDir(), "flat.mp4")
	ffmpeg(t, "-v", "error", "-f", "lavfi", "-i", "color=c=0x3366cc:size=64x48:rate=8", "-frames:v", "4",
		"-c:v", "libx264", "-pix_fmt", "yuv420p", path)
	frames, err := DecodeFrames(context.Background(), path)
	require.NoError(t, err)
	require.Len(t, frames, 4)
	m, err := Motion(frames)
	require.NoError(t, err)
	assert.Equal(t, []float64{0, 0, 0}, m)
	assert.True(t, IsBlank(frames[0], 1), "std %v", ChannelStdDev(frames[0]))
	c := frames[0].RGBAAt(10, 10)
	assert.InDelta(t, 0x33, int(c.R), 3)
	assert.InDelta(t, 0x66, int(c.G), 3)
	assert.InDelta(t, 0xcc, int(c.B), 3)
	assert.Equal(t, uint8(255), c.A)
}

func TestDecodeFramesErrors(t *testing.T) {
	requireFFmpeg(t)
	dir := t.TempDir()
	ctx := context.Background()
	_, err := DecodeFrames(ctx, filepath.Join(dir, "absent.mp4"))
	assert.ErrorContains(t, err, "absent.mp4: No such file")
	garbage := filepath.Join(dir, "garbage.mp4")
	require.NoError(t, os.WriteFile(garbage, bytes.Repeat([]byte("not a video "), 100), 0o644))
	_, err = DecodeFrames(ctx, garbage)
	assert.Error(t, err)

	path := clipsNamed("x264-320x192-16fps-17f-faststart")[0].make(t, dir)
	// Cut inside mdat, moov intact: ffmpeg alone would decode part and exit 0.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	cut := filepath.Join(dir, "cut.mp4")
	require.NoError(t, os.WriteFile(cut, data[:len(data)*2/3], 0o644))
	_, err = DecodeFrames(ctx, cut)
	assert.Error(t, err, "truncated clip")
	stop := errors.New("stop")
	n := 0
	err = EachFrame(ctx, path, func(i int, _ *image.RGBA) error {
		n++
		if i == 2 {
			return stop
		}
		return nil
	})
	assert.ErrorIs(t, err, stop)
	assert.Equal(t, 3, n)
}

// TestReadPAM: the frames ffmpeg writes are read only under the header its pam encoder writes
// for rgba; anything else is refused before a frame is allocated.
func TestReadPAM(t *testing.T) {
	header := "P7\nWIDTH 3\nHEIGHT 2\nDEPTH 4\nMAXVAL 255\nTUPLTYPE RGB_ALPHA\nENDHDR\n"
	pix := bytes.Repeat([]byte{1, 2, 3, 255}, 6)
	rd := bufio.NewReader(strings.NewReader(header + string(pix) + header + string(pix)))
	for range 2 {
		img, err := readPAM(rd)
		require.NoError(t, err)
		assert.Equal(t, image.Rect(0, 0, 3, 2), img.Rect)
		assert.Equal(t, pix, img.Pix)
	}
	_, err := readPAM(rd)
	assert.Equal(t, io.EOF, err, "the end between frames")

	for name, in := range map[string]string{
		"truncated pixels": header + string(pix[:5]),
		"truncated header": "P7\nWIDTH 3\n",
		"not PAM":          "P6\n3 2\n255\n",
		"RGB":              strings.Replace(header, "DEPTH 4", "DEPTH 3", 1),
		"16-bit":           strings.Replace(header, "MAXVAL 255", "MAXVAL 65535", 1),
		"grayscale":        strings.Replace(header, "RGB_ALPHA", "GRAYSCALE_ALPHA", 1),
		"no width":         strings.Replace(header, "WIDTH 3\n", "", 1),
		"zero height":      strings.Replace(header, "HEIGHT 2", "HEIGHT 0", 1),
		"negative width":   strings.Replace(header, "WIDTH 3", "WIDTH -3", 1),
		"extra field":      strings.Replace(header, "ENDHDR", "COMMENT x\nENDHDR", 1),
		"endless header":   "P7\n" + strings.Repeat("WIDTH 3\n", 100),
		"huge":             strings.Replace(strings.Replace(header, "WIDTH 3", "WIDTH 100000", 1), "HEIGHT 2", "HEIGHT 100000", 1),
	} {
		_, err := readPAM(bufio.NewReader(strings.NewReader(in)))
		assert.Error(t, err, name)
		assert.NotEqual(t, io.EOF, err, "%s: a broken frame is not the stream's end", name)
	}
}

func TestDecodeImage(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 5, 3))
	img.Set(1, 2, color.NRGBA{10, 20, 30, 255})
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, img))
	path := filepath.Join(t.TempDir(), "a.png")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))

	for name, decode := range map[string]func() (image.Image, error){
		"file":  func() (image.Image, error) { return DecodeImage(path) },
		"bytes": func() (image.Image, error) { return DecodeImageBytes(buf.Bytes()) },
	} {
		got, err := decode()
		require.NoError(t, err, name)
		assert.Equal(t, image.Rect(0, 0, 5, 3), got.Bounds())
		mad, err := MeanAbsDiff(img, got)
		require.NoError(t, err)
		assert.Zero(t, mad)
	}

	_, err := DecodeImageBytes([]byte("GIF89a nope"))
	assert.Error(t, err)
	_, err = DecodeImage(filepath.Join(t.TempDir(), "absent.png"))
	assert.Error(t, err)
	_, err = DecodeImageBytes(buf.Bytes()[:40])
	assert.Error(t, err, "truncated PNG")

	// A PNG whose header claims 100000x100000 is refused before any pixel allocation.
	bomb := pngHeader(100000, 100000)
	_, err = DecodeImageBytes(bomb)
	assert.ErrorContains(t, err, "MaxPixels")
}

// pngHeader is a PNG signature and IHDR chunk for an 8-bit RGBA image of w x h.
func pngHeader(w, h uint32) []byte {
	b := []byte("\x89PNG\r\n\x1a\n")
	ihdr := append([]byte("IHDR"), u32(w, h)...)
	ihdr = append(ihdr, 8, 6, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ihdr)-4))
	b = append(b, ihdr...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(ihdr))
}

func TestFrameDigestsAndFileSHA256(t *testing.T) {
	a := image.NewRGBA(image.Rect(0, 0, 4, 4))
	b := image.NewRGBA(image.Rect(0, 0, 4, 4))
	b.Pix[5] = 1
	d := FrameDigests([]*image.RGBA{a, b, a})
	assert.Len(t, d[0], 64)
	assert.Equal(t, d[0], d[2])
	assert.NotEqual(t, d[0], d[1])
	// "sha256 of Pix" for a plain frame; a sub-image hashes only its own rows.
	sum := sha256.Sum256(a.Pix)
	assert.Equal(t, hex.EncodeToString(sum[:]), d[0])
	big := image.NewRGBA(image.Rect(0, 0, 8, 8))
	sub := big.SubImage(image.Rect(2, 2, 6, 6)).(*image.RGBA)
	assert.Equal(t, d[0], FrameDigests([]*image.RGBA{sub})[0])
	assert.Empty(t, FrameDigests(nil))

	path := filepath.Join(t.TempDir(), "f.bin")
	require.NoError(t, os.WriteFile(path, []byte("abc"), 0o644))
	fsum, err := FileSHA256(path)
	require.NoError(t, err)
	assert.Equal(t, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", fsum)
	if _, err := exec.LookPath("sha256sum"); err == nil {
		out, err := exec.Command("sha256sum", path).Output()
		require.NoError(t, err)
		assert.Equal(t, strings.Fields(string(out))[0], fsum)
	}
	_, err = FileSHA256(filepath.Join(t.TempDir(), "absent"))
	assert.Error(t, err)
}
