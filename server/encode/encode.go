// Package encode turns Task frames into artifacts. Encoding belongs to the server and is the
// same for every family: H.264 MP4 through the ffmpeg CLI with fixed settings, PNG for images.
// Both read packed rgb24 (spec.Video), the layout workers hand over, so no pixel is converted
// before the encoder.
package encode

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/zlib"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"mediaqual/models/spec"
)

// X264 is the encoder configuration of every clip; reports record it with MP4Args.
// Threads is fixed, not derived from the host, because x264's output depends on its thread
// count: the same frames must give the same bytes on every machine. The preset was chosen by
// measurement on the GPU host (docs/PERFORMANCE.md, "Encode"): the encode must stay near 1 %
// of the Task at every pinned setting.
var X264 = struct {
	Preset  string
	CRF     int
	Threads int
}{Preset: "ultrafast", CRF: 18, Threads: 8}

// MP4Args are the ffmpeg arguments used for every clip of w×h rgb24 frames read from stdin.
func MP4Args(w, h, fps int, out string) []string {
	return []string{
		"-hide_banner", "-loglevel", "error", "-nostdin",
		"-f", "rawvideo", "-pix_fmt", "rgb24", "-s", fmt.Sprintf("%dx%d", w, h),
		"-framerate", strconv.Itoa(fps), "-i", "pipe:0",
		"-an", "-c:v", "libx264", "-preset", X264.Preset, "-crf", strconv.Itoa(X264.CRF),
		"-threads", strconv.Itoa(X264.Threads),
		"-pix_fmt", "yuv420p", "-sws_flags", "bicubic+accurate_rnd+full_chroma_int+bitexact",
		"-fflags", "+bitexact", "-flags:v", "+bitexact", "-map_metadata", "-1",
		"-movflags", "+faststart", "-video_track_timescale", strconv.Itoa(fps * 1000),
		"-f", "mp4", "-y", out,
	}
}

// MP4 writes v as an H.264 (yuv420p) MP4 at fps to path. The file appears atomically: it is
// written beside path and renamed, so a reader never sees a partial artifact.
func MP4(ctx context.Context, path string, v spec.Video, fps int) error {
	if err := v.Check(); err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	e, err := StartMP4(ctx, path, v.W, v.H, fps)
	if err != nil {
		return err
	}
	return e.Encode(v)
}

// MP4Encoder is an ffmpeg started before its frames exist: a lane starts it when a job's Task
// starts, so the process start and library loading (tens of milliseconds) overlap the Task
// instead of following it (docs/PERFORMANCE.md, "Encode"). Its output is MP4's, byte for byte.
// Every MP4Encoder ends with exactly one Encode or Abort.
type MP4Encoder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	tmp    string
	path   string
	w, h   int
}

// StartMP4 starts the encoder of a w×h clip at fps, to be written to path. ctx ending kills it.
func StartMP4(ctx context.Context, path string, w, h, fps int) (*MP4Encoder, error) {
	if fps <= 0 {
		return nil, fmt.Errorf("encode: fps %d must be positive", fps)
	}
	if w <= 0 || h <= 0 || w%2 != 0 || h%2 != 0 {
		return nil, fmt.Errorf("encode: %dx%d is not even in both dimensions (yuv420p needs it)", w, h)
	}
	e := &MP4Encoder{path: path, w: w, h: h, tmp: filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")}
	e.cmd = exec.CommandContext(ctx, "ffmpeg", MP4Args(w, h, fps, e.tmp)...)
	e.cmd.Stderr = &e.stderr
	var err error
	if e.stdin, err = e.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("encode: ffmpeg: %w", err)
	}
	return e, nil
}

// Fits says whether v is the clip the encoder was started for.
func (e *MP4Encoder) Fits(v spec.Video) bool { return v.W == e.w && v.H == e.h && v.Check() == nil }

// Encode feeds v to the encoder, waits for it and renames the file into place.
func (e *MP4Encoder) Encode(v spec.Video) error {
	defer os.Remove(e.tmp)
	if !e.Fits(v) {
		e.Abort()
		return fmt.Errorf("encode: the encoder was started for %dx%d, got %dx%dx%d frames", e.w, e.h, v.W, v.H, v.N)
	}
	_, werr := e.stdin.Write(v.Pix) // one write, no per-frame loop
	e.stdin.Close()
	if err := e.cmd.Wait(); err != nil || werr != nil {
		return fmt.Errorf("encode: ffmpeg: %v: %s", cmp.Or(err, werr), bytes.TrimSpace(e.stderr.Bytes()))
	}
	return os.Rename(e.tmp, e.path)
}

// Abort stops an encoder whose frames will not come and removes what it wrote.
func (e *MP4Encoder) Abort() {
	e.stdin.Close()
	_ = e.cmd.Process.Kill()
	_ = e.cmd.Wait()
	os.Remove(e.tmp)
}

// PNGLevel is the zlib level of every PNG. BestSpeed with the Up filter encoded a tiled
// 1024² photograph in about a seventh of the time of image/png's default encoder (32 against
// 226 ms on the development machine), at about 18 % more bytes (docs/PERFORMANCE.md, "PNG").
const PNGLevel = zlib.BestSpeed

// PNG writes frame 0 of v as an 8-bit RGB PNG: every row with the Up filter (the first with
// None), one zlib stream at PNGLevel. The output is a function of the pixels alone.
func PNG(w io.Writer, v spec.Video) error {
	if err := v.Check(); err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.WriteString("\x89PNG\r\n\x1a\n")
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(v.W))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(v.H))
	ihdr[8], ihdr[9] = 8, 2 // 8 bits, truecolour; compression, filter, interlace 0
	chunk(bw, "IHDR", ihdr[:])

	var z bytes.Buffer
	zw, err := zlib.NewWriterLevel(&z, PNGLevel)
	if err != nil {
		return err
	}
	stride := 3 * v.W
	pix := v.Frame(0)
	row := make([]byte, 1+stride)
	for y := 0; y < v.H; y++ {
		cur := pix[y*stride : (y+1)*stride]
		if y == 0 {
			row[0] = 0 // None
			copy(row[1:], cur)
		} else {
			row[0] = 2 // Up
			prev := pix[(y-1)*stride : y*stride]
			for i := range cur {
				row[1+i] = cur[i] - prev[i]
			}
		}
		if _, err := zw.Write(row); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	chunk(bw, "IDAT", z.Bytes())
	chunk(bw, "IEND", nil)
	return bw.Flush()
}

func chunk(w *bufio.Writer, typ string, data []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(data)))
	w.Write(n[:])
	crc := crc32.NewIEEE()
	crc.Write([]byte(typ))
	crc.Write(data)
	w.WriteString(typ)
	w.Write(data)
	binary.BigEndian.PutUint32(n[:], crc.Sum32())
	w.Write(n[:])
}

// FramesSHA256 digests v as the RGBA bytes of its frames (opaque alpha), the definition the
// ledger's frames_sha256 has always had, so digests stay comparable across releases. Rows are
// expanded a frame at a time into a reused buffer.
func FramesSHA256(v spec.Video) string {
	h := sha256.New()
	buf := make([]byte, 4*v.W*v.H)
	for i := 0; i < v.N; i++ {
		spec.ExpandRGB(buf, v.Frame(i))
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil))
}
