// Package encode turns Task frames into artifacts. Encoding belongs to the server and is the
// same for every family: H.264 MP4 through the ffmpeg CLI with fixed settings, PNG for images.
// Both read packed rgb24 (spec.Video), the layout workers hand over, so no pixel is converted
// before the encoder.
package encode

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/flate"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/adler32"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"

	"github.com/mediaqual/mediaqual/models/spec"
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

// Profile is the H.264 profile ffprobe reports for X264's clips: ultrafast turns off CABAC
// and B-frames, so x264 signals Constrained Baseline. docs/API.md states it and these
// settings; TestDocsStateTheEncoder holds the docs to MP4Args and ffprobe.
const Profile = "Constrained Baseline"

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
// instead of following it (docs/PERFORMANCE.md, "Encode"). The Task may Stream the clip's
// first frames while it still runs; Encode then writes only the rest. Its output is MP4's,
// byte for byte. Every MP4Encoder ends with exactly one Encode or Abort. It digests the frames
// as it feeds them to ffmpeg (FramesSHA256), so a streamed clip's digest is done with it.
type MP4Encoder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	tmp    string
	path   string
	w, h   int
	done   chan struct{} // closed when the writer has closed stdin and returned
	digest *framesDigest // of every chunk written, in order; the writer's alone until done

	mu       sync.Mutex
	cond     *sync.Cond // signals the writer: a chunk was queued, or the encoder is closing
	queue    [][]byte   // chunks not yet written to ffmpeg
	closing  bool       // Encode or Abort: no more chunks; the writer closes stdin when the queue is empty
	streamed int        // bytes taken by Stream
	first    *byte      // the first streamed byte: Fits checks it is the clip's own
	next     []byte     // the capacity after the last streamed chunk, where the next one must start
	broken   bool       // a streamed chunk did not follow the one before it
	werr     error      // the first failed write; later chunks are dropped
}

// StartMP4 starts the encoder of a w×h clip at fps, to be written to path. ctx ending kills it.
func StartMP4(ctx context.Context, path string, w, h, fps int) (*MP4Encoder, error) {
	if fps <= 0 {
		return nil, fmt.Errorf("encode: fps %d must be positive", fps)
	}
	if w <= 0 || h <= 0 || w%2 != 0 || h%2 != 0 {
		return nil, fmt.Errorf("encode: %dx%d is not even in both dimensions (yuv420p needs it)", w, h)
	}
	e := &MP4Encoder{path: path, w: w, h: h, tmp: filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp"),
		done: make(chan struct{}), digest: newFramesDigest()}
	e.cond = sync.NewCond(&e.mu)
	e.cmd = exec.CommandContext(ctx, "ffmpeg", MP4Args(w, h, fps, e.tmp)...)
	e.cmd.Stderr = &e.stderr
	e.cmd.SysProcAttr = dieWithServer()
	var err error
	if e.stdin, err = e.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("encode: ffmpeg: %w", err)
	}
	go e.write()
	return e, nil
}

// write is the one goroutine that feeds ffmpeg, so that Stream never waits for x264. Each
// chunk is digested once ffmpeg has it; the last only after stdin is closed, so x264 flushes
// while the digest finishes.
func (e *MP4Encoder) write() {
	defer close(e.done)
	for {
		e.mu.Lock()
		for len(e.queue) == 0 && !e.closing {
			e.cond.Wait()
		}
		if len(e.queue) == 0 {
			e.mu.Unlock()
			e.stdin.Close() // ffmpeg's end of input
			return
		}
		chunk, failed := e.queue[0], e.werr != nil
		e.queue[0], e.queue = nil, e.queue[1:]
		last := e.closing && len(e.queue) == 0 // closing: nothing more is queued
		e.mu.Unlock()
		if failed {
			continue
		}
		if _, err := e.stdin.Write(chunk); err != nil {
			e.mu.Lock()
			e.werr = err
			e.mu.Unlock()
			continue
		}
		if last {
			e.stdin.Close()
			e.digest.write(chunk)
			return
		}
		e.digest.write(chunk)
	}
}

// Stream queues pix, the clip's next bytes, and returns at once (spec.Request.Frames). pix
// must lie in the buffer Encode will get, right after what was streamed before; Fits holds
// the encoder to that. Streaming after Encode or Abort does nothing.
func (e *MP4Encoder) Stream(pix []byte) {
	if len(pix) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing || e.broken {
		return
	}
	if e.streamed == 0 {
		e.first = &pix[0]
	} else if len(e.next) == 0 || &e.next[0] != &pix[0] {
		e.broken = true // not the continuation of one buffer: Fits refuses every clip
		return
	}
	e.next = pix[len(pix):cap(pix)]
	e.streamed += len(pix)
	e.queue = append(e.queue, pix)
	e.cond.Signal()
}

// Streamed is how many bytes Stream has taken.
func (e *MP4Encoder) Streamed() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.streamed
}

// Fits says whether v is the clip the encoder was started for and, when frames were
// streamed, the very buffer they came from, at least as long: a server fault may replace or
// shorten the frames after the Task, and then the clip must be encoded from scratch.
func (e *MP4Encoder) Fits(v spec.Video) bool { return e.misfit(v) == "" }

func (e *MP4Encoder) misfit(v spec.Video) string {
	if v.W != e.w || v.H != e.h || v.Check() != nil {
		return fmt.Sprintf("the encoder was started for %dx%d, got %dx%dx%d frames", e.w, e.h, v.W, v.H, v.N)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.broken:
		return "the streamed chunks were not consecutive runs of one buffer"
	case e.streamed > 0 && &v.Pix[0] != e.first:
		return fmt.Sprintf("%d bytes were streamed from another buffer than the clip's", e.streamed)
	case e.streamed > len(v.Pix):
		return fmt.Sprintf("%d bytes were streamed, the clip has %d", e.streamed, len(v.Pix))
	}
	return ""
}

// Encode writes what of v was not streamed, waits for the encoder and renames the file into
// place.
func (e *MP4Encoder) Encode(v spec.Video) error {
	defer os.Remove(e.tmp)
	if why := e.misfit(v); why != "" {
		e.Abort()
		return fmt.Errorf("encode: %s", why)
	}
	e.mu.Lock()
	if rest := v.Pix[e.streamed:]; len(rest) > 0 {
		e.queue = append(e.queue, rest) // one write, no per-frame loop
	}
	e.closing = true
	e.cond.Signal()
	e.mu.Unlock()
	<-e.done
	err := e.cmd.Wait()
	if werr := e.werr; err != nil || werr != nil {
		return fmt.Errorf("encode: ffmpeg: %v: %s", cmp.Or(err, werr), bytes.TrimSpace(e.stderr.Bytes()))
	}
	return os.Rename(e.tmp, e.path)
}

// FramesSHA256 is FramesSHA256 of the clip an Encode that returned nil wrote.
func (e *MP4Encoder) FramesSHA256() string {
	<-e.done
	return e.digest.sum()
}

// Abort stops an encoder whose frames will not come, drops what is queued and removes what it
// wrote.
func (e *MP4Encoder) Abort() {
	e.mu.Lock()
	e.queue, e.closing = nil, true
	e.cond.Signal()
	e.mu.Unlock()
	_ = e.cmd.Process.Kill() // a write in progress fails: nothing reads the pipe any more
	<-e.done
	_ = e.cmd.Wait()
	os.Remove(e.tmp)
}

// PNGLevel is the zlib level of every PNG. BestSpeed with the Up filter encoded a tiled
// 1024² photograph in about a seventh of the time of image/png's default encoder (32 against
// 226 ms on the development machine), at about 18 % more bytes (docs/PERFORMANCE.md, "PNG").
const PNGLevel = flate.BestSpeed

// pngStripBytes is the filtered data in one independently compressed strip of rows. Strips
// are compressed in parallel and joined into one zlib stream (pigz's way: each but the last
// ends in a sync flush, so they concatenate). The strip height depends on the width alone,
// so the bytes do not depend on how many cores encode them. BestSpeed ignores preset
// dictionaries, so a strip loses nothing but the matches across its first row.
const pngStripBytes = 256 << 10

// PNG writes frame 0 of v as an 8-bit RGB PNG: every row with the Up filter (the first with
// None), one zlib stream at PNGLevel made of strips of rows compressed in parallel. The
// output is a function of the pixels alone.
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

	stride := 3 * v.W
	rows := max(1, pngStripBytes/(1+stride))
	strips := make([]pngStrip, (v.H+rows-1)/rows)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i := range strips {
		y0, y1 := i*rows, min(v.H, (i+1)*rows)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			strips[i] = deflateStrip(v.Frame(0), stride, y0, y1, y1 == v.H)
		}()
	}
	wg.Wait()
	// One IDAT: the zlib header, the strips, the adler32 of all the filtered rows.
	parts := [][]byte{{0x78, 0x01}} // deflate, 32 KiB window, the fastest level's flag
	var sum uint32 = 1              // adler32 of nothing
	for _, s := range strips {
		if s.err != nil {
			return s.err
		}
		parts = append(parts, s.deflated)
		sum = adlerCombine(sum, s.adler, s.n)
	}
	parts = append(parts, binary.BigEndian.AppendUint32(nil, sum))
	chunk(bw, "IDAT", parts...)
	chunk(bw, "IEND")
	return bw.Flush()
}

// flateWriters keeps deflaters between strips and images: a new one zeroes about 1 MB.
var flateWriters = sync.Pool{New: func() any {
	zw, err := flate.NewWriter(nil, PNGLevel)
	if err != nil {
		panic(err) // PNGLevel is a valid level
	}
	return zw
}}

type pngStrip struct {
	deflated []byte
	adler    uint32 // of the filtered rows
	n        int    // filtered bytes
	err      error
}

// deflateStrip filters rows y0..y1 of pix and deflates them, ending in a sync flush unless
// the strip is the last.
func deflateStrip(pix []byte, stride, y0, y1 int, last bool) pngStrip {
	n := (y1 - y0) * (1 + stride)
	var out bytes.Buffer
	out.Grow(n + n>>10 + 64) // incompressible rows: stored blocks, 5 bytes each 64 KiB
	zw := flateWriters.Get().(*flate.Writer)
	defer flateWriters.Put(zw)
	zw.Reset(&out)
	sum := adler32.New()
	row := make([]byte, 1+stride)
	for y := y0; y < y1; y++ {
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
		sum.Write(row)
		if _, err := zw.Write(row); err != nil {
			return pngStrip{err: err}
		}
	}
	var err error
	if last {
		err = zw.Close()
	} else {
		err = zw.Flush()
	}
	return pngStrip{deflated: out.Bytes(), adler: sum.Sum32(), n: n, err: err}
}

func chunk(w *bufio.Writer, typ string, data ...[]byte) {
	var n [4]byte
	size := 0
	for _, d := range data {
		size += len(d)
	}
	binary.BigEndian.PutUint32(n[:], uint32(size))
	w.Write(n[:])
	crc := crc32.NewIEEE()
	crc.Write([]byte(typ))
	w.WriteString(typ)
	for _, d := range data {
		crc.Write(d)
		w.Write(d)
	}
	binary.BigEndian.PutUint32(n[:], crc.Sum32())
	w.Write(n[:])
}

// FramesSHA256 digests v as the RGBA bytes of its frames (opaque alpha), the definition the
// ledger's frames_sha256 has always had, so digests stay comparable across releases.
func FramesSHA256(v spec.Video) string {
	d := newFramesDigest()
	d.write(v.Pix)
	return d.sum()
}

// framesDigest is FramesSHA256 fed in pieces, so an encoder can digest a clip's frames as
// they stream in. A piece may end inside a pixel; the rest waits for the next.
type framesDigest struct {
	h    hash.Hash
	rgba []byte // expansion buffer, reused
	part []byte // 0-2 bytes of a pixel split across pieces
}

func newFramesDigest() *framesDigest {
	return &framesDigest{h: sha256.New(), rgba: make([]byte, 4*digestPixels)}
}

// digestPixels bounds the expansion buffer (256 kB of RGBA).
const digestPixels = 64 << 10

func (d *framesDigest) write(rgb []byte) {
	if len(d.part) > 0 {
		n := min(3-len(d.part), len(rgb))
		d.part, rgb = append(d.part, rgb[:n]...), rgb[n:]
		if len(d.part) < 3 {
			return
		}
		spec.ExpandRGB(d.rgba, d.part)
		d.h.Write(d.rgba[:4])
		d.part = d.part[:0]
	}
	for len(rgb) >= 3 {
		n := min(len(rgb)/3, digestPixels)
		spec.ExpandRGB(d.rgba, rgb[:3*n])
		d.h.Write(d.rgba[:4*n])
		rgb = rgb[3*n:]
	}
	d.part = append(d.part, rgb...)
}

// sum is the digest of every whole pixel written.
func (d *framesDigest) sum() string { return hex.EncodeToString(d.h.Sum(nil)) }
