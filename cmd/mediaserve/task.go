package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/internal/jsonl"
	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
)

// taskJob is one native Task: its request fields (HTTP names), an optional reference image
// and the directory that receives the artifact and actual.json. -batch reads these as JSON lines.
type taskJob struct {
	Out       string            `json:"out"`
	Reference string            `json:"reference,omitempty"`
	Fields    map[string]string `json:"fields"`
}

// runTask runs native Tasks through the server's encoder, without HTTP: one from the flags, or
// every line of a -batch file with the weights loaded once (a GPU family's load can take longer
// than its Task). Each job writes its artifact plus a JSON record of settings and actuals.
func runTask(args []string, stderr io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("mediaserve task", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: mediaserve task -model <id> [-set name=value ...] [-reference image] [-out dir] [flags]
       mediaserve task -model <id> -batch jobs.jsonl [flags]

Runs the model's native Task without HTTP, through the same settings rules and encoder as a
served job (docs/API.md, "The native path"), and writes artifact.mp4 or artifact.png and
actual.json to -out.

flags:
`)
		fs.PrintDefaults()
	}
	model := fs.String("model", "", "checkpoint id")
	capability := fs.String("capability", "", "workload (default: the model's only one)")
	refPath := fs.String("reference", "", "reference image for image_edit")
	out := fs.String("out", ".", "output directory")
	engine := fs.String("engine", "", "the engine, as mediaserve -engine ("+strings.Join(spec.Engines, ", ")+"; default: the row's)")
	layout := fs.String("layout", os.Getenv("MEDIAQUAL_LAYOUT"), "the GPU layout, as mediaserve -layout, chosen by the same rule (env MEDIAQUAL_LAYOUT)")
	raw := fs.Bool("raw", false, "also write the raw rgb24 frames the artifact is encoded from, as <out>/frames.rgb")
	batch := fs.String("batch", "", `JSON-lines file of jobs {"out": dir, "reference": path, "fields": {name: value}}, run in order with one load (replaces -out, -reference and -set)`)
	loadFlag := fs.Duration("load-timeout", 0, "how long the model's load may take (default: from its row or bundle size; env MEDIAQUAL_LOAD_TIMEOUT)")
	var sets listFlag
	fs.Var(&sets, "set", "request field as name=value, with the HTTP field names (repeatable)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *model == "" {
		var ids []string
		for _, cp := range models.Servable() {
			ids = append(ids, cp.ID)
		}
		return fmt.Errorf("-model is required: one of %s", strings.Join(ids, ", "))
	}
	cps, err := selectModels([]string{*model}, log)
	if err != nil {
		return err
	}
	cp := cps[0]
	capab := spec.Capability(*capability)
	if capab == "" {
		if len(cp.Capabilities) != 1 {
			return fmt.Errorf("%s declares %v: choose one with -capability", cp.ID, cp.Capabilities)
		}
		capab = cp.Capabilities[0]
	}
	var jobs []taskJob
	if *batch != "" {
		if len(sets) > 0 || *refPath != "" || *out != "." {
			return fmt.Errorf("-batch replaces -out, -reference and -set: give the job's fields in the batch file")
		}
		if jobs, err = readBatch(*batch); err != nil {
			return err
		}
	} else {
		j := taskJob{Out: *out, Reference: *refPath, Fields: map[string]string{}}
		for _, kv := range sets {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("-set %q is not name=value", kv)
			}
			j.Fields[k] = v
		}
		jobs = []taskJob{j}
	}

	ms, err := buildModels(cps, *engine, spec.Layout(*layout), log, *loadFlag, 1) // the native path: one lane
	if err != nil {
		return err
	}
	m := ms[0]
	defer closeAll(ms)
	ctx, stop := signalContext()
	defer stop()
	if err := loadAll(ctx, ms, *loadFlag); err != nil {
		return err
	}
	for i, j := range jobs {
		path, err := runJob(ctx, m, capab, j, *raw, log)
		if err != nil {
			if len(jobs) > 1 {
				return fmt.Errorf("batch job %d (out %s): %w", i+1, j.Out, err)
			}
			return err
		}
		fmt.Println(path)
	}
	return nil
}

func readBatch(path string) ([]taskJob, error) {
	jobs, err := jsonl.ReadStrict[taskJob](path)
	if err != nil {
		return nil, err
	}
	for n, j := range jobs {
		if j.Out == "" {
			return nil, fmt.Errorf(`%s: job %d: "out" is required`, path, n+1)
		}
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("%s: no jobs", path)
	}
	return jobs, nil
}

// runJob runs one job and writes <out>/artifact.{mp4,png}, <out>/actual.json and, with raw,
// <out>/frames.rgb.
func runJob(ctx context.Context, m server.Model, capab spec.Capability, j taskJob, raw bool, log *slog.Logger) (string, error) {
	var ref []byte
	if j.Reference != "" {
		var err error
		if ref, err = os.ReadFile(j.Reference); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(j.Out, 0o755); err != nil {
		return "", err
	}
	name := "artifact.mp4"
	if capab == spec.ImageEdit {
		name = "artifact.png"
	}
	path, err := filepath.Abs(filepath.Join(j.Out, name))
	if err != nil {
		return "", err
	}
	rawPath := ""
	if raw {
		rawPath = filepath.Join(j.Out, "frames.rgb")
	}
	// A step line each, with the time since the Task began: a long Task (minutes, for the big
	// rows) shows it is moving, and one cut off by a time limit still tells its speed.
	start := time.Now()
	progress := func(done, total int) {
		log.Info("step", "done", done, "of", total, "elapsed_s", time.Since(start).Seconds())
	}
	settings, p, err := server.RunNative(ctx, m, capab, j.Fields, ref, path, rawPath, progress)
	if err != nil {
		return "", err
	}
	cp := m.Checkpoint
	rec := struct {
		Model      string             `json:"model"`
		Revision   string             `json:"revision"`
		Capability spec.Capability    `json:"capability"`
		Settings   spec.Settings      `json:"settings"`
		Product    server.Product     `json:"product"`
		TaskWallMS float64            `json:"task_call_wall_ms"`
		PhasesMS   map[string]float64 `json:"task_phases_ms,omitempty"`
		HandoverMS float64            `json:"handover_ms"`
		EncodeMS   float64            `json:"encode_ms"`
		Streamed   int                `json:"streamed_frames"` // frames in the encoder before the Task returned
	}{cp.ID, cp.Revision, capab, settings, p, ms(p.TaskWall), p.Phases, ms(p.Handover), ms(p.Encode), p.StreamedFrames}
	b, _ := json.MarshalIndent(rec, "", "  ")
	return path, os.WriteFile(filepath.Join(j.Out, "actual.json"), append(b, '\n'), 0o644)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
