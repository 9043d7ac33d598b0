package server

import (
	"bytes"
	"image"
	_ "image/jpeg" // reference uploads may be JPEG
	_ "image/png"

	_ "golang.org/x/image/webp" // and WebP, as OpenAI's edit API allows

	"github.com/mediaqual/mediaqual/models/spec"
)

// An edit's reference. The request checks only the upload's header and size (checkReference:
// image.DecodeConfig reads no pixel data, so a header claiming a huge image is refused before
// anything is allocated) and queues the job at once. A Task that decodes the upload itself (a
// worker) gets the bytes as they came and the server decodes nothing; any other Task gets the
// image from the standard library's decoders, decoded on a goroutine started when the job is
// queued, which the lane waits for before it starts the Task (pendingReference). An upload
// whose header passes but whose data does not decode fails its job as the request's fault: the
// synchronous edit answers 400 naming image.

// fileReferenceTask is implemented by Tasks that decode an edit's reference from
// spec.Request.ReferenceFile themselves (worker.Task): they are given no decoded Reference.
type fileReferenceTask interface {
	DecodesReferenceFile() bool
}

// decodesReferenceFile says whether task reads the upload itself.
func decodesReferenceFile(task spec.Task) bool {
	t, ok := task.(fileReferenceTask)
	return ok && t.DecodesReferenceFile()
}

// checkReference checks an upload's header: a PNG, JPEG or WebP of at most maxPixels pixels.
func checkReference(b []byte, maxPixels int) (*spec.Size, *apiError) {
	cfg, _, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return nil, invalid("image", "the reference is not a PNG, JPEG or WebP image: %v", err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || cfg.Width*cfg.Height > maxPixels {
		return nil, invalid("image", "the reference is %dx%d; at most %d pixels are accepted", cfg.Width, cfg.Height, maxPixels)
	}
	return &spec.Size{W: cfg.Width, H: cfg.Height}, nil
}

// decodeReference decodes an upload checkReference accepted. Its error is the request's
// fault (BadInput), naming image.
func decodeReference(b []byte) (image.Image, error) {
	img, format, err := image.Decode(bytes.NewReader(b))
	if err != nil {
		e := invalid("image", "the %s reference could not be decoded: %v", format, err)
		return nil, &spec.Error{Code: e.Code, Message: e.Message, BadInput: true, Param: e.Param}
	}
	return img, nil
}

// pendingReference is an in-process edit's reference, decoded on its own goroutine: made
// before its job is queued, started once the job is admitted (a refused job decodes nothing),
// waited for by the lane.
type pendingReference chan decodedReference

type decodedReference struct {
	img image.Image
	err error
}

func (p pendingReference) start(b []byte) {
	go func() {
		img, err := decodeReference(b)
		p <- decodedReference{img, err}
	}()
}

// wait returns the decoded reference, once; a nil p (nothing to decode) gives nil, nil.
func (p pendingReference) wait() (image.Image, error) {
	if p == nil {
		return nil, nil
	}
	d := <-p
	return d.img, d.err
}
