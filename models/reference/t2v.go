package reference

import (
	"context"
	"time"

	"mediaqual/models/spec"
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
	frames, err := renderClip(ctx, clipParams{
		prompt: s.Prompt, seed: s.Seed, size: s.Size, frames: s.NumFrames, fps: s.FPS,
		steps: s.Steps, sat: s.Guidance / 5, progress: req.Progress, // guidance 5 is neutral
	})
	if err != nil {
		return spec.Output{}, err
	}
	act := imageActual(s)
	act.NumFrames = len(frames)
	act.FPS = s.FPS
	act.DurationS = float64(len(frames)) / float64(s.FPS)
	return spec.Output{Frames: frames, Actual: act, TaskWall: time.Since(start)}, nil
}
