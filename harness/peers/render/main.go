// Command render is the peers' model stand-in (scripts/peers/render.py runs it): one native Task
// of a mediaqual reference row, for a model that honours what it is asked. It encodes nothing:
// it writes the Task's frames raw (rgb24, frame after frame) to <out>/frames.rgb and what it ran
// to <out>/actual.json, and prints the frames' path; the peer's own code makes the MP4 or the
// image from them. The request fields resolve as mediaserve resolves them (server.Resolve), on
// the row's controls widened to admit the settings asked, as a real checkpoint behind a peer
// (which checks none of the row's controls) renders any size, step count, guidance, fps or frame
// count it can; what the Task itself cannot make (a size past its largest side, say) still
// fails, with its message. Each step is logged as `msg=step done=N of=M`, as `mediaserve task`
// does.
//
//	render -model ref-t2v -out DIR [-reference PNG] -set name=value ...
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	_ "image/jpeg" // a reference the peer re-encoded
	_ "image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
)

type sets map[string]string

func (s sets) String() string { return fmt.Sprint(map[string]string(s)) }
func (s sets) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("-set %q is not name=value", kv)
	}
	s[k] = v
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func run() error {
	model := flag.String("model", "", "reference row id")
	outDir := flag.String("out", "", "output directory")
	refPath := flag.String("reference", "", "reference image (image_edit)")
	fields := sets{}
	flag.Var(fields, "set", "request field name=value (repeatable)")
	flag.Parse()
	e, err := models.Lookup(*model)
	if err != nil {
		return err
	}
	if e.NewTask == nil {
		return fmt.Errorf("%s has no in-process Task: the stand-in renders the reference rows only", e.ID)
	}
	cp := e.Checkpoint
	cp.Controls = admit(cp.Controls, fields)
	task, err := cp.NewTask()
	if err != nil {
		return err
	}
	req := spec.Request{}
	var refSize *spec.Size
	if *refPath != "" {
		if req.ReferenceFile, err = os.ReadFile(*refPath); err != nil {
			return err
		}
		if req.Reference, _, err = image.Decode(bytes.NewReader(req.ReferenceFile)); err != nil {
			return fmt.Errorf("the reference: %w", err)
		}
		b := req.Reference.Bounds()
		refSize = &spec.Size{W: b.Dx(), H: b.Dy()}
	}
	settings, rerr := server.Resolve(cp, e.Workload, fields, refSize)
	if rerr != nil {
		return rerr
	}
	req.Settings = settings
	start := time.Now()
	req.Progress = func(done, total int) {
		fmt.Fprintf(os.Stderr, "msg=step done=%d of=%d elapsed_s=%g\n", done, total, time.Since(start).Seconds())
	}
	out, err := task.Run(context.Background(), req)
	if err != nil {
		return err
	}
	v, err := out.Pixels()
	if err == nil {
		err = v.Check()
	}
	if err != nil {
		return fmt.Errorf("the Task's frames: %w", err)
	}
	path, err := filepath.Abs(filepath.Join(*outDir, "frames.rgb"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, v.Pix, 0o644); err != nil {
		return err
	}
	rec := map[string]any{"task_call_wall_ms": float64(out.TaskWall.Microseconds()) / 1000,
		"width": v.W, "height": v.H, "frames": v.N, "actual": out.Actual}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	fmt.Println(path)
	return os.WriteFile(filepath.Join(*outDir, "actual.json"), b, 0o644)
}

// admit widens c to admit every setting in fields that it does not.
func admit(c spec.Controls, fields map[string]string) spec.Controls {
	if s, err := spec.ParseSize(fields["size"]); err == nil && !c.AllowsSize(s) {
		c.Sizes = append(append([]spec.Size(nil), c.Sizes...), s)
	}
	if n, err := strconv.Atoi(fields["num_inference_steps"]); err == nil {
		c.Steps.Min, c.Steps.Max = min(c.Steps.Min, n), max(c.Steps.Max, n)
	}
	if g, err := strconv.ParseFloat(fields[c.GuidanceParam], 64); err == nil {
		c.Guidance.Min, c.Guidance.Max = min(c.Guidance.Min, g), max(c.Guidance.Max, g)
	}
	if n, err := strconv.Atoi(fields["fps"]); err == nil && len(c.FPS) > 0 && !c.AllowsFPS(n) {
		c.FPS = append(append([]int(nil), c.FPS...), n)
	}
	if n, err := strconv.Atoi(fields["num_frames"]); err == nil && c.Frames != nil && !c.Frames.Allows(n) {
		r := *c.Frames
		r.Step, r.Offset = 1, 0
		r.Range.Min, r.Range.Max = min(r.Range.Min, n), max(r.Range.Max, n)
		c.Frames = &r
	}
	return c
}
