package server_test

import (
	"image/color"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/mediaqual/mediaqual/fixtures"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
)

// The overhead benchmarks use a Task of fixed duration, so everything above it is the
// server's: HTTP, parsing, queueing, checks, encode and bookkeeping. They report p50/p95 of
// (client end-to-end − Task-call wall), with and without the encode step.
const benchTaskDelay = 20 * time.Millisecond

func BenchmarkVideoJobOverhead(b *testing.B) {
	e := start(b, server.Config{QueueCapacity: 4, Models: []server.Model{
		{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: &fakeTask{delay: benchTaskDelay}},
	}})
	fields := map[string]string{"model": "fake", "prompt": "bench", "size": "64x48", "num_frames": "5", "fps": "8"}
	var total, noEncode, server []float64
	for b.Loop() {
		t0 := time.Now()
		id := e.postForm(b, "/v1/videos", fields).json(b)["id"].(string)
		var done map[string]any
		for { // 1 ms polling: detection delay is at most one interval plus a GET
			done = e.do(b, "GET", "/v1/videos/"+id, "", nil).json(b)
			if done["status"] == "completed" {
				break
			}
			if done["status"] == "failed" {
				b.Fatalf("job failed: %v", done)
			}
			time.Sleep(time.Millisecond)
		}
		e2e := float64(time.Since(t0).Microseconds()) / 1000
		tm := done["timing"].(map[string]any)
		task, enc := tm["task_call_wall_ms"].(float64), tm["encode_ms"].(float64)
		total = append(total, e2e-task)
		noEncode = append(noEncode, e2e-task-enc)
		server = append(server, tm["total_ms"].(float64)-task-enc)
		e.do(b, "DELETE", "/v1/videos/"+id, "", nil)
	}
	report(b, "overhead", total)
	report(b, "overhead-excl-encode", noEncode)
	report(b, "in-server-excl-encode", server)
}

func BenchmarkImageEditOverhead(b *testing.B) {
	e, photo := editBench(b)
	// A tiny reference, and a photograph at the edit rows' pinned 1024² (the output stays 64x48,
	// so its PNG is not what is timed). "receive" checks the reference's header only; this
	// in-process Task's lane waits for its decode, which the overhead includes.
	for _, ref := range []struct {
		name string
		png  []byte
	}{{"ref-64x48", pngBytes(b, 64, 48, color.RGBA{10, 20, 30, 255})}, {"ref-1024x1024-photo", photo}} {
		b.Run(ref.name, func(b *testing.B) {
			fields := map[string]string{"model": "fake", "prompt": "bench", "size": "64x48"}
			var total, noEncode, receive []float64
			for b.Loop() {
				t0 := time.Now()
				r := e.postForm(b, "/v1/images/edits", fields, part{"image", "ref.png", ref.png})
				e2e := float64(time.Since(t0).Microseconds()) / 1000
				if r.status != 200 {
					b.Fatalf("edit: %d %s", r.status, r.body)
				}
				tm := r.json(b)["timing"].(map[string]any)
				task, enc := tm["task_call_wall_ms"].(float64), tm["encode_ms"].(float64)
				total = append(total, e2e-task)
				noEncode = append(noEncode, e2e-task-enc)
				receive = append(receive, tm["receive_ms"].(float64))
			}
			report(b, "overhead", total)
			report(b, "overhead-excl-encode", noEncode)
			report(b, "receive", receive)
		})
	}
}

// BenchmarkImageEditReceiveAfterIdle is the 1024² photograph's receive as a server sees it
// between real edits, seconds apart: the garbage collector has run (it runs every few
// megabytes allocated) and the process has been idle.
func BenchmarkImageEditReceiveAfterIdle(b *testing.B) {
	e, photo := editBench(b)
	fields := map[string]string{"model": "fake", "prompt": "bench", "size": "64x48"}
	var receive []float64
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		time.Sleep(200 * time.Millisecond)
		b.StartTimer()
		r := e.postForm(b, "/v1/images/edits", fields, part{"image", "ref.png", photo})
		if r.status != 200 {
			b.Fatalf("edit: %d %s", r.status, r.body)
		}
		receive = append(receive, r.json(b)["timing"].(map[string]any)["receive_ms"].(float64))
	}
	report(b, "receive", receive)
}

// editBench serves the fake edit model and returns the 1024² photograph the edit benchmarks
// upload.
func editBench(b *testing.B) (*env, []byte) {
	e := start(b, server.Config{Models: []server.Model{
		{Checkpoint: fakeCheckpoint("fake", spec.ImageEdit), Task: &fakeTask{delay: benchTaskDelay}},
	}})
	photo, err := fixtures.Image("chelsea.png", 1024, 1024)
	if err != nil {
		b.Fatal(err)
	}
	return e, photo
}

func report(b *testing.B, name string, ms []float64) {
	if len(ms) == 0 {
		return
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	b.ReportMetric(s[len(s)/2], name+"-p50-ms")
	b.ReportMetric(s[min(len(s)-1, len(s)*95/100)], name+"-p95-ms")
}
