// Package encode turns Task frames into artifacts. Encoding belongs to the server and is the
// same for every family: H.264 MP4 through the ffmpeg CLI with fixed settings, PNG for images.
package encode

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// x264Threads is fixed, not derived from the host, because x264's output depends on its thread
// count: the same frames must give the same bytes on every machine.
const x264Threads = "4"

// MP4Args are the ffmpeg arguments used for every clip; they are recorded in reports.
func MP4Args(w, h, fps int, out string) []string {
	return []string{
		"-hide_banner", "-loglevel", "error", "-nostdin",
		"-f", "rawvideo", "-pix_fmt", "rgba", "-s", fmt.Sprintf("%dx%d", w, h),
		"-framerate", strconv.Itoa(fps), "-i", "pipe:0",
		"-an", "-c:v", "libx264", "-preset", "medium", "-crf", "18", "-threads", x264Threads,
		"-pix_fmt", "yuv420p", "-sws_flags", "bicubic+accurate_rnd+full_chroma_int+bitexact",
		"-fflags", "+bitexact", "-flags:v", "+bitexact", "-map_metadata", "-1",
		"-movflags", "+faststart", "-video_track_timescale", strconv.Itoa(fps * 1000),
		"-f", "mp4", "-y", out,
	}
}

// MP4 writes frames as an H.264 (yuv420p) MP4 at fps to path. The file appears atomically:
// it is written beside path and renamed, so a reader never sees a partial artifact.
func MP4(ctx context.Context, path string, frames []*image.RGBA, fps int) error {
	if len(frames) == 0 {
		return fmt.Errorf("encode: no frames")
	}
	if fps <= 0 {
		return fmt.Errorf("encode: fps %d must be positive", fps)
	}
	b := frames[0].Rect
	w, h := b.Dx(), b.Dy()
	if w%2 != 0 || h%2 != 0 {
		return fmt.Errorf("encode: %dx%d is not even in both dimensions (yuv420p needs it)", w, h)
	}
	for i, f := range frames {
		if f.Rect.Dx() != w || f.Rect.Dy() != h || f.Stride != 4*w {
			return fmt.Errorf("encode: frame %d is %dx%d (stride %d), want %dx%d", i, f.Rect.Dx(), f.Rect.Dy(), f.Stride, w, h)
		}
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	defer os.Remove(tmp)

	cmd := exec.CommandContext(ctx, "ffmpeg", MP4Args(w, h, fps, tmp)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("encode: starting ffmpeg: %w", err)
	}
	werr := func() error {
		defer stdin.Close()
		for _, f := range frames {
			if _, err := stdin.Write(f.Pix[:4*w*h]); err != nil {
				return err
			}
		}
		return nil
	}()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("encode: ffmpeg: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	if werr != nil {
		return fmt.Errorf("encode: writing frames to ffmpeg: %w", werr)
	}
	return os.Rename(tmp, path)
}

// PNG encodes one image with the standard library's deterministic encoder.
func PNG(w io.Writer, img image.Image) error {
	return (&png.Encoder{CompressionLevel: png.DefaultCompression}).Encode(w, img)
}
