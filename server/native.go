package server

import (
	"context"
	"fmt"
	"os"

	"github.com/mediaqual/mediaqual/models/spec"
)

// DefaultMaxPixels bounds reference images on every path.
const DefaultMaxPixels = 4096 * 4096

// RunNative is the native path: the same settings resolution, Task, checks and encoder as an
// HTTP job, without HTTP. The suite compares its artifact with the served one byte for byte.
// fields use the HTTP field names; reference is the encoded image for image_edit. With rawPath
// set, the raw rgb24 frames the artifact is encoded from are written there too (the suite
// measures the encoder's quality against them). progress, when set, is called as steps complete.
func RunNative(ctx context.Context, m Model, capability spec.Capability, fields map[string]string, reference []byte, outPath, rawPath string, progress func(done, total int)) (spec.Settings, Product, error) {
	cp := m.Checkpoint
	if !cp.Has(capability) {
		return spec.Settings{}, Product{}, fmt.Errorf("model %s does not declare %s (it declares %v)", cp.ID, capability, cp.Capabilities)
	}
	req := spec.Request{Progress: progress}
	var refSize *spec.Size
	if capability == spec.ImageEdit {
		if reference == nil {
			return spec.Settings{}, Product{}, fmt.Errorf("image_edit needs a reference image")
		}
		var e *apiError
		if refSize, _, e = checkReference(reference, DefaultMaxPixels); e != nil {
			return spec.Settings{}, Product{}, e
		}
		req.ReferenceFile = reference
		if !decodesReferenceFile(m.Task) { // as a served job: a worker decodes the upload itself
			var err error
			if req.Reference, err = decodeReference(reference); err != nil {
				return spec.Settings{}, Product{}, err
			}
		}
	}
	settings, e := Resolve(cp, capability, fields, refSize)
	if e != nil {
		return settings, Product{}, e
	}
	req.Settings = settings
	g, err := generate(ctx, m.Task, cp, capability, req, nil, outPath)
	if err != nil {
		return settings, Product{}, err
	}
	if rawPath != "" {
		if err := os.WriteFile(rawPath, g.video.Pix, 0o644); err != nil {
			return settings, Product{}, err
		}
	}
	p, err := g.encode(ctx, outPath, nil)
	return settings, p, err
}
