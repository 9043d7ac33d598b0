package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"image"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server/encode"
)

// Product is one finished generation: the encoded artifact and what was really produced.
type Product struct {
	Path           string             `json:"path"` // "" for an edit answered inline
	Inline         []byte             `json:"-"`    // that edit's PNG, kept in memory instead
	SHA256         string             `json:"sha256"`
	Bytes          int64              `json:"bytes"`
	FramesSHA256   string             `json:"frames_sha256"` // over the Task's raw frames as RGBA, before encoding
	Actual         spec.Actual        `json:"actual"`
	TaskWall       time.Duration      `json:"-"`
	Phases         map[string]float64 `json:"-"`
	Handover       time.Duration      `json:"-"`
	Encode         time.Duration      `json:"-"`
	StreamedFrames int                `json:"-"` // handed to the encoder before the Task returned; 0: encoded from scratch
	PeakMemoryMB   float64            `json:"peak_memory_mb"`
}

// A generation is two halves, generate (the Task and the checks of what it produced) and
// encode (MP4 for text_to_video, PNG for image_edit): a lane runs the second beside the next
// Task. HTTP jobs and `mediaserve task` (RunNative) both go through both, which is what makes
// their artifacts comparable byte for byte.

// generated is a Task's checked output waiting for the encoder.
type generated struct {
	capability spec.Capability
	req        spec.Request
	video      spec.Video
	p          Product            // what is known before encoding
	mp4        *encode.MP4Encoder // started with the Task (video); nil: start it now
}

// generate runs the Task and checks its output (f: an optional fault; never on the native path).
// A video's encoder starts with the Task, writing to path, and the Task may stream its frames
// into it (Request.Frames), so neither ffmpeg's start-up nor the encoding of the frames made
// first is in the job's latency. Failing to start it here is not an error yet: encode starts
// it again and reports that.
func generate(ctx context.Context, task spec.Task, cp spec.Checkpoint, capability spec.Capability, req spec.Request, f *fault, path string) (g generated, err error) {
	if capability == spec.TextToVideo {
		if g.mp4, _ = encode.StartMP4(ctx, path, req.Size.W, req.Size.H, f.fps(req.FPS)); g.mp4 != nil {
			req.Frames = g.mp4.Stream
			defer func() {
				if err != nil {
					g.mp4.Abort()
				}
			}()
		}
	}
	start := time.Now()
	out, err := f.task(task).Run(ctx, req)
	ran := time.Since(start)
	if err != nil {
		return g, err
	}
	if err := ctx.Err(); err != nil {
		return g, err
	}
	v, err := checkActual(cp, capability, req.Settings, out)
	if err != nil {
		return g, err
	}
	return generated{capability: capability, req: req, video: v, mp4: g.mp4, p: Product{
		Actual: out.Actual, TaskWall: out.TaskWall, Phases: out.Phases, PeakMemoryMB: out.PeakMemoryMB,
		// What Run took beyond the Task's own call: a worker's quantize, write, protocol and
		// the server's read. In-process Tasks time their whole Run, so this is about 0.
		Handover: max(0, ran-out.TaskWall),
	}}, nil
}

// encode writes the artifact to path ("" for an edit answered inline: its PNG stays in memory,
// Product.Inline) and digests the raw frames: a video's encoder digests the frames it is fed,
// so a streamed clip's digest is mostly done when its Task returns; otherwise (a PNG, or frames
// a fault replaced) the digest runs beside the encoder.
func (g generated) encode(ctx context.Context, path string, f *fault) (Product, error) {
	p := g.p
	p.Path = path
	start := time.Now()
	v := f.frames(g.video, g.req)
	fits := g.mp4 != nil && g.mp4.Fits(v)
	var digest chan string
	if !fits || !sameFrames(v, g.video) {
		digest = make(chan string, 1)
		go func() { digest <- encode.FramesSHA256(g.video) }()
	}
	var err error
	switch {
	case fits:
		p.StreamedFrames = g.mp4.Streamed() / v.FrameBytes()
		err = g.mp4.Encode(v)
	case g.capability == spec.TextToVideo:
		if g.mp4 != nil {
			g.mp4.Abort() // a fault changed the frames (their size, or those streamed)
		}
		err = encode.MP4(ctx, path, v, f.fps(g.req.FPS))
	default:
		p.SHA256, p.Bytes, p.Inline, err = encodePNG(path, v)
	}
	if err == nil && path != "" {
		var changed bool
		if changed, err = f.encoded(path); changed {
			p.SHA256 = ""
		}
	}
	if digest != nil {
		p.FramesSHA256 = <-digest
	} else if err == nil {
		p.FramesSHA256 = g.mp4.FramesSHA256()
	}
	p.Encode = time.Since(start)
	if err != nil {
		return Product{}, &spec.Error{Code: "encode_failed", Message: err.Error()}
	}
	if p.SHA256 == "" { // ffmpeg wrote the file, or a fault changed it
		if p.SHA256, p.Bytes, err = digestFile(path); err != nil {
			os.Remove(path)
			return Product{}, err
		}
	}
	return p, nil
}

// sameFrames says whether a and b are the very same pixels (one buffer, one length).
func sameFrames(a, b spec.Video) bool {
	return len(a.Pix) == len(b.Pix) && len(a.Pix) > 0 && &a.Pix[0] == &b.Pix[0]
}

// checkActual enforces "nothing silently changed": a Task that produced anything other than
// what was asked fails the job, naming the field.
func checkActual(cp spec.Checkpoint, capability spec.Capability, s spec.Settings, out spec.Output) (spec.Video, error) {
	mismatch := func(field string, asked, got any) (spec.Video, error) {
		return spec.Video{}, &spec.Error{Code: "actual_mismatch", Message: fmt.Sprintf("%s: asked %v, produced %v", field, asked, got)}
	}
	wantFrames := 1
	if capability == spec.TextToVideo {
		wantFrames = s.NumFrames
	}
	// In-process frames one by one first: a wrong one is named by its index.
	for i, f := range out.Frames {
		if f == nil || f.Rect.Min != (image.Point{}) || f.Rect.Dx() != s.Size.W || f.Rect.Dy() != s.Size.H {
			got := "nil"
			if f != nil {
				got = f.Rect.String()
			}
			return mismatch(fmt.Sprintf("frame %d size", i), s.Size, got)
		}
	}
	v, err := out.Pixels()
	if err == nil {
		err = v.Check()
	}
	if err != nil {
		return spec.Video{}, &spec.Error{Code: "actual_mismatch", Message: "frames: " + err.Error()}
	}
	switch {
	case v.N != wantFrames:
		return mismatch("frames", wantFrames, v.N)
	case v.W != s.Size.W || v.H != s.Size.H:
		return mismatch("frame size", s.Size, fmt.Sprintf("%dx%d", v.W, v.H))
	}
	a := out.Actual
	switch {
	case a.Width != s.Size.W || a.Height != s.Size.H:
		return mismatch("actual size", s.Size, fmt.Sprintf("%dx%d", a.Width, a.Height))
	case a.Steps != s.Steps:
		return mismatch("num_inference_steps", s.Steps, a.Steps)
	case a.Seed != s.Seed:
		return mismatch("seed", s.Seed, a.Seed)
	case a.Guidance != s.Guidance:
		return mismatch("guidance", s.Guidance, a.Guidance)
	case a.Precision != cp.Precision:
		return mismatch("precision", cp.Precision, a.Precision)
	case a.Engine != cp.Engine:
		return mismatch("engine", cp.Engine, a.Engine)
	case a.Layout != string(cp.Layout):
		return mismatch("layout", cp.Layout, a.Layout)
	}
	if capability == spec.TextToVideo {
		switch {
		case a.NumFrames != s.NumFrames:
			return mismatch("num_frames", s.NumFrames, a.NumFrames)
		case a.FPS != s.FPS:
			return mismatch("fps", s.FPS, a.FPS)
		case math.Abs(a.DurationS-float64(s.NumFrames)/float64(s.FPS)) > 1e-6:
			return mismatch("duration_s", float64(s.NumFrames)/float64(s.FPS), a.DurationS)
		}
	}
	return v, nil
}

// encodePNG encodes img in memory and digests it beside the file's write; without a path the
// bytes are the product (an edit answered inline, which keeps nothing on the server: no file is
// written only to be read back and deleted, about 3 and 0.8 ms of a 1024² edit on the H200
// host, throwaway benchmarks).
func encodePNG(path string, img spec.Video) (sha string, n int64, inline []byte, err error) {
	var buf bytes.Buffer
	filtered := img.H * (1 + 3*img.W)
	buf.Grow(filtered + filtered>>8 + 1<<12) // incompressible rows too: one allocation, no copies
	if err := encode.PNG(&buf, img); err != nil {
		return "", 0, nil, err
	}
	b := buf.Bytes()
	if path == "" {
		digest := sha256.Sum256(b)
		return hex.EncodeToString(digest[:]), int64(len(b)), b, nil
	}
	sum := make(chan [sha256.Size]byte, 1)
	go func() { sum <- sha256.Sum256(b) }()
	err = writeFileAtomic(path, b)
	digest := <-sum
	return hex.EncodeToString(digest[:]), int64(len(b)), nil, err
}

// writeFileAtomic writes b to a temporary name beside path (the one removeFiles knows) and
// renames it, so a reader never sees a partial artifact.
func writeFileAtomic(path string, b []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	err := os.WriteFile(tmp, b, 0o644)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func digestFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}
