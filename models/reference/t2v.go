package reference

import (
	"context"
	"image"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

// t2vTask is ref-t2v: the procedural text-to-video renderer. Stateless, so one value serves
// concurrent Runs.
type t2vTask struct{}

func (t2vTask) Run(ctx context.Context, req spec.Request) (spec.Output, error) {
	start := time.Now()
	s := req.Settings
	if err := checkImage(s); err != nil {
		return spec.Output{}, err
	}
	if s.NumFrames < 1 || s.NumFrames > maxFrames {
		return spec.Output{}, invalid("num_frames %d outside 1..%d", s.NumFrames, maxFrames)
	}
	if s.FPS < 1 || s.FPS > 1000 {
		return spec.Output{}, invalid("fps %d outside 1..1000", s.FPS)
	}
	if s.NumFrames*s.Size.W*s.Size.H > maxClipPixel {
		return spec.Output{}, invalid("%d frames of %s exceed %d pixels", s.NumFrames, s.Size, maxClipPixel)
	}
	// Each frame is packed as rgb24 into the clip's one buffer once its last step is done and
	// handed on at once, as a GPU worker streams its decoded chunks.
	v := spec.Video{W: s.Size.W, H: s.Size.H, N: s.NumFrames}
	v.Pix = make([]byte, v.N*v.FrameBytes())
	final := func(f int, frame *image.RGBA) {
		spec.PackRGB(v.Frame(f), frame.Pix)
		if req.Frames != nil {
			req.Frames(v.Frame(f))
		}
	}
	if _, err := renderClip(ctx, clipParams{
		prompt: s.Prompt, seed: s.Seed, size: s.Size, frames: s.NumFrames, fps: s.FPS,
		steps: s.Steps, sat: s.Guidance / 5, progress: req.Progress, final: final, // guidance 5 is neutral
	}); err != nil {
		return spec.Output{}, err
	}
	act := imageActual(s)
	act.NumFrames = v.N
	act.FPS = s.FPS
	act.DurationS = float64(v.N) / float64(s.FPS)
	return spec.Output{Video: &v, Actual: act, TaskWall: time.Since(start)}, nil
}
