package server

import (
	"bytes"
	"image"
	_ "image/jpeg" // reference uploads may be JPEG
	_ "image/png"

	_ "golang.org/x/image/webp" // and WebP, as OpenAI's edit API allows

	"github.com/mediaqual/mediaqual/models/spec"
)

// An edit's reference. The request checks only the upload's header (checkImage:
// image.DecodeConfig reads no pixel data, so a header claiming a huge image is refused before
// anything is allocated), charges its decode cost to the memory budget (budget.go) and queues
// the job at once. A Task that decodes the upload itself (a worker) gets the bytes as they came
// and the server decodes nothing; any other Task gets the image from the standard library's
// decoders, decoded when a lane takes the job, so a queued job holds its upload but never its
// pixels. An upload whose header passes but whose data does not decode fails its job as the
// request's fault: the synchronous edit answers 400 naming image.

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
// cost is what decoding it here would hold (decodeCost).
func checkReference(b []byte, maxPixels int) (size *spec.Size, cost int64, e *apiError) {
	cfg, cost, err := checkImage(b)
	if err != nil {
		return nil, 0, invalid("image", "the reference is not a PNG, JPEG or WebP image: %v", err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || int64(cfg.Width)*int64(cfg.Height) > int64(maxPixels) {
		return nil, 0, invalid("image", "the reference is %dx%d; at most %d pixels are accepted", cfg.Width, cfg.Height, maxPixels)
	}
	return &spec.Size{W: cfg.Width, H: cfg.Height}, cost, nil
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
