package reference

import (
	"context"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

// t2iTask is ref-t2i. It declares image_edit but IGNORES req.Reference entirely, on purpose:
// it renders frame 0 of the ref-t2v scene for the prompt and seed. It is the negative control
// a reference-influence probe must flag; do not "fix" it to read the reference.
type t2iTask struct{}

func (t2iTask) Run(ctx context.Context, req spec.Request) (spec.Output, error) {
	start := time.Now()
	s := req.Settings
	if err := checkImage(s); err != nil {
		return spec.Output{}, err
	}
	// One frame at t = 0; fps only scales time, so any positive value gives the same image.
	frames, err := renderClip(ctx, clipParams{
		prompt: s.Prompt, seed: s.Seed, size: s.Size, frames: 1, fps: 1,
		steps: s.Steps, sat: s.Guidance, progress: req.Progress, // its default 1 is neutral, as for ref-edit
	})
	if err != nil {
		return spec.Output{}, err
	}
	return spec.Output{Frames: frames, Actual: imageActual(s), TaskWall: time.Since(start)}, nil
}
