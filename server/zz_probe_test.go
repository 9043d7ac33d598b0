package server_test

import (
	"image/color"
	"runtime"
	"testing"

	"mediaqual/models/spec"
	"mediaqual/server"
)

func TestZZRetention(t *testing.T) {
	e := start(t, server.Config{Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.ImageEdit), Task: &fakeTask{}}}})
	ref := pngBytes(t, 1024, 1024, color.RGBA{1, 2, 3, 255})
	heap := func() uint64 { runtime.GC(); var m runtime.MemStats; runtime.ReadMemStats(&m); return m.HeapAlloc >> 20 }
	before := heap()
	for range 20 {
		r := e.postForm(t, "/v1/images/edits", map[string]string{"model": "fake", "prompt": "p", "size": "32x32", "response_format": "url"}, part{"image", "r.png", ref})
		if r.status != 200 { t.Fatalf("%s", r.body) }
	}
	t.Logf("heap before %d MiB after %d MiB", before, heap())
}
