package worker

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"slices"
	"testing"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

// BenchmarkImageEditHandover: what a 1024² edit costs the out-of-process Task beyond the
// worker's own call, with the test worker (which decodes the reference and copies it into its
// output): the reference written for the worker and decoded there, the protocol, the output
// read back.
func BenchmarkImageEditHandover(b *testing.B) {
	fx := newTask(b, "ok")
	ref := image.NewNRGBA(image.Rect(0, 0, 1024, 1024))
	for i := range ref.Pix {
		ref.Pix[i] = byte(i*7 + i/4096)
		if i%4 == 3 {
			ref.Pix[i] = 255
		}
	}
	var file bytes.Buffer
	if err := png.Encode(&file, ref); err != nil {
		b.Fatal(err)
	}
	// The request as the server makes it: the upload as it came, which the worker decodes.
	req := spec.Request{Settings: spec.Settings{Prompt: "p", Size: spec.Size{W: 1024, H: 1024}, Steps: 1, Guidance: 1, Seed: 1},
		ReferenceFile: file.Bytes()}
	if _, err := fx.task.Run(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	var over []float64
	for b.Loop() {
		t0 := time.Now()
		out, err := fx.task.Run(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		over = append(over, float64(time.Since(t0)-out.TaskWall)/1e6)
	}
	slices.Sort(over)
	b.ReportMetric(over[len(over)/2], "beyond-task-p50-ms")
}
