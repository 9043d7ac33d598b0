package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"mediaqual/models/spec"
	"mediaqual/server"
)

// runTask runs one native Task through the server's encoder, without HTTP, and writes the
// artifact plus a JSON record of settings and actuals.
func runTask(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("mediaserve task", flag.ContinueOnError)
	model := fs.String("model", "", "checkpoint id")
	capability := fs.String("capability", "", "workload (default: the model's only one)")
	refPath := fs.String("reference", "", "reference image for image_edit")
	out := fs.String("out", ".", "output directory")
	var sets listFlag
	fs.Var(&sets, "set", "request field as name=value, with the HTTP field names (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cps, err := selectModels([]string{*model})
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
	fields := map[string]string{}
	for _, kv := range sets {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("-set %q is not name=value", kv)
		}
		fields[k] = v
	}
	var ref []byte
	if *refPath != "" {
		if ref, err = os.ReadFile(*refPath); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	m, err := buildModel(cp, log)
	if err != nil {
		return err
	}
	ms := []server.Model{m}
	defer closeAll(ms)
	ctx, stop := signalContext()
	defer stop()
	if err := loadAll(ctx, ms); err != nil {
		return err
	}
	name := "artifact.mp4"
	if capab == spec.ImageEdit {
		name = "artifact.png"
	}
	path, err := filepath.Abs(filepath.Join(*out, name))
	if err != nil {
		return err
	}
	settings, p, err := server.RunNative(ctx, m, capab, fields, ref, path)
	if err != nil {
		return err
	}
	rec := struct {
		Model      string          `json:"model"`
		Revision   string          `json:"revision"`
		Capability spec.Capability `json:"capability"`
		Settings   spec.Settings   `json:"settings"`
		Product    server.Product  `json:"product"`
		TaskWallMS float64         `json:"task_call_wall_ms"`
		EncodeMS   float64         `json:"encode_ms"`
	}{cp.ID, cp.Revision, capab, settings, p, float64(p.TaskWall.Microseconds()) / 1000, float64(p.Encode.Microseconds()) / 1000}
	b, _ := json.MarshalIndent(rec, "", "  ")
	if err := os.WriteFile(filepath.Join(*out, "actual.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}
