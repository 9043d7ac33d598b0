package media

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/draw"
	_ "image/jpeg" // DecodeImage also takes JPEG and WebP, which image APIs may return
	_ "image/png"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	_ "golang.org/x/image/webp"

	"github.com/mediaqual/mediaqual/internal/procgroup"
)

// MaxPixels bounds the frame or image area the package will allocate for, so that a
// hostile header (a PNG claiming 100000x100000) fails instead of exhausting memory.
// 8K UHD is about 33 megapixels.
var MaxPixels = 1 << 26

// decodeSwsFlags makes the YUV to RGB conversion accurate and bit-exact, so frame
// digests do not depend on which SIMD path swscale picks on a given machine.
const decodeSwsFlags = "bicubic+accurate_rnd+full_chroma_int+bitexact"

func stderrOf(err error) []byte {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return bytes.TrimSpace(ee.Stderr)
	}
	return nil
}

// EachFrame decodes path's first video stream with the ffmpeg CLI and calls fn with
// every frame in order, as RGBA with opaque alpha. Each frame is freshly allocated and
// belongs to fn. Frames are in coded orientation (-noautorotate). A non-nil error from fn
// stops decoding and is returned. Every decoded frame comes out once (-fps_mode
// passthrough): ffmpeg's default for raw output would duplicate or drop frames of a
// variable-rate clip to make it constant-rate. Decoding errors fail it (-xerror, and any
// error ffmpeg logs): left alone, ffmpeg decodes what it can of a damaged or truncated
// file and exits 0, which would pass off a partial clip as a whole one.
//
// ffmpeg writes each frame as a PAM image, whose header carries the frame's size: one
// process per clip, where raw output needed an ffprobe for the size first (about 70 ms a
// file, a third of a qualification's ffmpeg processes).
func EachFrame(ctx context.Context, path string, fn func(i int, frame *image.RGBA) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := procgroup.Own(exec.CommandContext(ctx, "ffmpeg", "-v", "error", "-xerror", "-nostdin", "-noautorotate", "-i", path,
		"-map", "0:v:0", "-fps_mode", "passthrough", "-f", "image2pipe", "-c:v", "pam", "-pix_fmt", "rgba", "-sws_flags", decodeSwsFlags, "-"))
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	rd := bufio.NewReaderSize(stdout, 1<<20)
	var size image.Rectangle
	for i := 0; ; i++ {
		img, err := readPAM(rd)
		if err == io.EOF {
			break
		}
		if err == nil && i > 0 && img.Rect != size {
			err = fmt.Errorf("%dx%d, where frame 0 was %dx%d", img.Rect.Dx(), img.Rect.Dy(), size.Dx(), size.Dy())
		}
		if err != nil {
			// Most likely ffmpeg failed mid-stream: its exit status and stderr say why.
			cancel()
			werr := cmd.Wait()
			return fmt.Errorf("decode %s: frame %d: %v; ffmpeg: %v: %s", path, i, err, werr, bytes.TrimSpace(stderr.Bytes()))
		}
		size = img.Rect
		if err := fn(i, img); err != nil {
			cancel()
			_ = cmd.Wait()
			return err
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("decode %s: ffmpeg: %v: %s", path, err, bytes.TrimSpace(stderr.Bytes()))
	}
	if msg := bytes.TrimSpace(stderr.Bytes()); len(msg) > 0 {
		return fmt.Errorf("decode %s: ffmpeg reported errors: %s", path, msg)
	}
	return nil
}

// readPAM reads one PAM image of ffmpeg's pam encoder with -pix_fmt rgba (the header
// "P7", WIDTH, HEIGHT, DEPTH 4, MAXVAL 255, TUPLTYPE RGB_ALPHA, ENDHDR, a line each, then
// the pixels), refusing any other header and frames larger than MaxPixels before
// allocating. io.EOF: the stream ended before another image began.
func readPAM(rd *bufio.Reader) (*image.RGBA, error) {
	fields := map[string]string{}
	for line := 0; ; line++ {
		b, err := rd.ReadSlice('\n')
		if err == io.EOF && line == 0 && len(b) == 0 {
			return nil, io.EOF
		}
		if err != nil {
			return nil, fmt.Errorf("PAM header line %d: %w", line, err)
		}
		text := string(b[:len(b)-1])
		if line == 0 && text != "P7" {
			return nil, fmt.Errorf("not a PAM image: starts %q", text)
		}
		if text == "ENDHDR" {
			break
		}
		if line > 5 {
			return nil, fmt.Errorf("PAM header longer than ffmpeg writes")
		}
		if line > 0 {
			key, value, _ := strings.Cut(text, " ")
			fields[key] = value
		}
	}
	w, errW := strconv.Atoi(fields["WIDTH"])
	h, errH := strconv.Atoi(fields["HEIGHT"])
	if errW != nil || errH != nil || w <= 0 || h <= 0 || fields["DEPTH"] != "4" || fields["MAXVAL"] != "255" || fields["TUPLTYPE"] != "RGB_ALPHA" || len(fields) != 5 {
		return nil, fmt.Errorf("PAM header %q: not 8-bit RGBA of a positive size", fields)
	}
	if w > MaxPixels/h {
		return nil, fmt.Errorf("%dx%d frames exceed MaxPixels (%d)", w, h, MaxPixels)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	if n, err := io.ReadFull(rd, img.Pix); err != nil {
		return nil, fmt.Errorf("read %d of %d bytes of pixels: %w", n, len(img.Pix), err)
	}
	return img, nil
}

// DecodeFrames decodes every frame of path's first video stream (see EachFrame). It
// holds the whole clip in memory, 4 bytes per pixel per frame; use EachFrame to stream.
func DecodeFrames(ctx context.Context, path string) ([]*image.RGBA, error) {
	var frames []*image.RGBA
	err := EachFrame(ctx, path, func(_ int, f *image.RGBA) error {
		frames = append(frames, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(frames) == 0 {
		return nil, fmt.Errorf("decode %s: no frames", path)
	}
	return frames, nil
}

// DecodeImage decodes a PNG (or JPEG, or WebP) file, refusing images larger than
// MaxPixels before allocating for them.
func DecodeImage(path string) (image.Image, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	img, err := DecodeImageBytes(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return img, nil
}

// DecodeImageBytes is DecodeImage on bytes in memory.
func DecodeImageBytes(b []byte) (image.Image, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("decode image: %w", err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || cfg.Width > MaxPixels/cfg.Height {
		return nil, fmt.Errorf("decode %s: %dx%d is empty or exceeds MaxPixels (%d)", format, cfg.Width, cfg.Height, MaxPixels)
	}
	img, _, err := image.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", format, err)
	}
	return img, nil
}

// ToRGBA returns img as *image.RGBA with origin (0, 0): img itself when it already is
// one, else a converted copy. It lets PNG stills and decoded frames share FrameDigests.
func ToRGBA(img image.Image) *image.RGBA {
	if r, ok := img.(*image.RGBA); ok && r.Rect.Min == (image.Point{}) {
		return r
	}
	b := img.Bounds()
	out := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(out, out.Rect, img, b.Min, draw.Src)
	return out
}

// FrameDigests is the SHA-256 (hex) of each frame's pixels, row by row over its bounds.
// For frames from DecodeFrames that is exactly the hash of Pix. Equal digests mean
// bit-identical frames: what a determinism check needs.
func FrameDigests(frames []*image.RGBA) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		h := sha256.New()
		w := 4 * f.Rect.Dx()
		for y := f.Rect.Min.Y; y < f.Rect.Max.Y; y++ {
			off := f.PixOffset(f.Rect.Min.X, y)
			h.Write(f.Pix[off : off+w])
		}
		out[i] = hex.EncodeToString(h.Sum(nil))
	}
	return out
}

// FileSHA256 is the SHA-256 (hex) of a file's bytes.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// limitedBuffer keeps the first 64 KiB written to it: enough of ffmpeg's stderr to
// explain a failure, bounded however chatty the failure is.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := 64<<10 - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
