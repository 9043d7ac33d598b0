package server

import (
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

	"mediaqual/models/spec"
	"mediaqual/server/encode"
)

// Product is one finished generation: the encoded artifact and what was really produced.
type Product struct {
	Path         string        `json:"path"`
	SHA256       string        `json:"sha256"`
	Bytes        int64         `json:"bytes"`
	FramesSHA256 string        `json:"frames_sha256"` // over the Task's raw RGBA frames, before encoding
	Actual       spec.Actual   `json:"actual"`
	TaskWall     time.Duration `json:"-"`
	Encode       time.Duration `json:"-"`
	PeakMemoryMB float64       `json:"peak_memory_mb"`
}

// Produce runs task on req, checks that the output is exactly what was asked, and encodes it
// to path (MP4 for text_to_video, PNG for image_edit). HTTP jobs and `mediaserve task` both go
// through here, which is what makes their artifacts comparable byte for byte.
func Produce(ctx context.Context, task spec.Task, cp spec.Checkpoint, capability spec.Capability, req spec.Request, path string) (Product, error) {
	return produce(ctx, task, cp, capability, req, path, nil)
}

// produce is Produce with an optional fault switched on (the native path never has one).
func produce(ctx context.Context, task spec.Task, cp spec.Checkpoint, capability spec.Capability, req spec.Request, path string, f *fault) (Product, error) {
	out, err := f.task(task).Run(ctx, req)
	if err != nil {
		return Product{}, err
	}
	if err := ctx.Err(); err != nil {
		return Product{}, err
	}
	if err := checkActual(cp, capability, req.Settings, out); err != nil {
		return Product{}, err
	}
	p := Product{Path: path, Actual: out.Actual, TaskWall: out.TaskWall, PeakMemoryMB: out.PeakMemoryMB}
	h := sha256.New()
	for _, f := range out.Frames {
		h.Write(f.Pix)
	}
	p.FramesSHA256 = hex.EncodeToString(h.Sum(nil))

	start := time.Now()
	frames := f.frames(out.Frames, req)
	if capability == spec.TextToVideo {
		err = encode.MP4(ctx, path, frames, f.fps(req.FPS))
	} else {
		err = writePNG(path, frames[0])
	}
	if err == nil {
		err = f.encoded(path)
	}
	p.Encode = time.Since(start)
	if err != nil {
		return Product{}, &spec.Error{Code: "encode_failed", Message: err.Error()}
	}
	if p.SHA256, p.Bytes, err = digestFile(path); err != nil {
		os.Remove(path)
		return Product{}, err
	}
	return p, nil
}

// checkActual enforces "nothing silently changed": a Task that produced anything other than
// what was asked fails the job, naming the field.
func checkActual(cp spec.Checkpoint, capability spec.Capability, s spec.Settings, out spec.Output) error {
	mismatch := func(field string, asked, got any) error {
		return &spec.Error{Code: "actual_mismatch", Message: fmt.Sprintf("%s: asked %v, produced %v", field, asked, got)}
	}
	wantFrames := 1
	if capability == spec.TextToVideo {
		wantFrames = s.NumFrames
	}
	if len(out.Frames) != wantFrames {
		return mismatch("frames", wantFrames, len(out.Frames))
	}
	for i, f := range out.Frames {
		if f == nil || f.Rect.Min != (image.Point{}) || f.Rect.Dx() != s.Size.W || f.Rect.Dy() != s.Size.H {
			got := "nil"
			if f != nil {
				got = f.Rect.String()
			}
			return mismatch(fmt.Sprintf("frame %d size", i), s.Size, got)
		}
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
	return nil
}

func writePNG(path string, img *image.RGBA) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := encode.PNG(f, img); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
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
