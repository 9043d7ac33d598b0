// Command render is the peers' GPU stand-in (scripts/peers/render.py runs it): one native Task
// of a mediaqual reference row, rendered through mediaserve's own Task and encoder
// (server.RunNative), for a model that honours what it is asked. The row's controls are widened
// to admit the settings asked, as a real checkpoint behind a peer (which checks none of the
// row's controls) renders any size, step count, guidance, fps or frame count it can; what the
// renderer itself cannot make (a size past its largest side, say) still fails, with its
// message. It writes <out>/artifact.{mp4,png} and <out>/actual.json, prints the artifact's
// path, and logs each step as `msg=step done=N of=M`, as `mediaserve task` does.
//
//	render -model ref-t2v -out DIR [-reference PNG] -set name=value ...
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
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
	out := flag.String("out", "", "output directory")
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
	var ref []byte
	if *refPath != "" {
		if ref, err = os.ReadFile(*refPath); err != nil {
			return err
		}
	}
	name := "artifact.mp4"
	if e.Workload == spec.ImageEdit {
		name = "artifact.png"
	}
	path, err := filepath.Abs(filepath.Join(*out, name))
	if err != nil {
		return err
	}
	start := time.Now()
	progress := func(done, total int) {
		fmt.Fprintf(os.Stderr, "msg=step done=%d of=%d elapsed_s=%g\n", done, total, time.Since(start).Seconds())
	}
	_, p, err := server.RunNative(context.Background(), server.Model{Checkpoint: cp, Runtime: "in-process", Task: task}, e.Workload, fields, ref, path, "", progress)
	if err != nil {
		return err
	}
	rec := map[string]any{"task_call_wall_ms": float64(p.TaskWall.Microseconds()) / 1000, "product": p}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	fmt.Println(path)
	return os.WriteFile(filepath.Join(*out, "actual.json"), b, 0o644)
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
