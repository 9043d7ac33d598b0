package server

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"io"
	"net/http"
	"sync"
)

// The memory budget: the bytes requests may make the server hold, server-wide, whatever they
// send. Charged to it: a body's bytes while it is parsed, an upload's buffer for as long as its
// job lives, and, for an edit the server decodes itself, the decode's cost as its header tells
// it (decodeCost), from admission to the job's end, so the decode that runs when a lane takes
// the job always fits. A request that would exceed it is refused with 429 over_memory_budget;
// one that could never fit is refused with 413 image_too_large.

// DefaultMemoryBudget is Config.MemoryBudget's default.
const DefaultMemoryBudget = 512 << 20

type budget struct {
	mu          sync.Mutex
	limit, used int64
}

// reservation is one request's (then its job's) share of the budget.
type reservation struct {
	b *budget
	n int64
}

func (b *budget) reserve() *reservation { return &reservation{b: b} }

// take adds n bytes to r, or refuses (429) when the budget cannot hold them now.
func (r *reservation) take(n int64) *apiError {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return errf(http.StatusTooManyRequests, "over_memory_budget", "",
			"the server's memory budget (%d bytes) is in use by other requests; retry later", b.limit)
	}
	b.used += n
	r.n += n
	return nil
}

// release gives all of r back; it may be called more than once.
func (r *reservation) release() {
	if r == nil {
		return
	}
	r.b.mu.Lock()
	r.b.used -= r.n
	r.n = 0
	r.b.mu.Unlock()
}

// inUse is the budget's bytes in use now.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// chargedBody charges every byte read from a request body to a reservation (released once the
// body is parsed): a body being parsed is held at least once by the parser.
type chargedBody struct {
	io.ReadCloser
	res *reservation
	err *apiError // the refusal, once the budget could not take a read
}

func (c *chargedBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	if n > 0 {
		if e := c.res.take(int64(n)); e != nil {
			c.err = e
			return 0, e
		}
	}
	return n, err
}

// overBudget turns a read error that was the budget's refusal back into it.
func overBudget(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) && ae.Code == "over_memory_budget" {
		return ae
	}
	return nil
}

// decodeCost is what decoding the upload b costs in bytes, from its header alone: its pixels
// times the bytes per pixel Go's decoder of its format and variant allocates (a progressive
// JPEG keeps every component's coefficients, 4 bytes a pixel each, beside the image; a CMYK
// JPEG is decoded to YCbCr and K, then converted; 16-bit PNGs take 8 bytes a pixel; an
// interlaced PNG builds each pass as an image of its own), plus 4 bytes a pixel for the
// Task's RGBA working copy, plus the decoder's own tables (decoderOverhead).
func decodeCost(b []byte, cfg image.Config, format string) int64 {
	px := int64(cfg.Width) * int64(cfg.Height)
	bpp := int64(4) // RGBA / NRGBA
	switch cfg.ColorModel {
	case color.GrayModel, color.AlphaModel:
		bpp = 1
	case color.Gray16Model, color.Alpha16Model:
		bpp = 2
	case color.RGBA64Model, color.NRGBA64Model:
		bpp = 8
	case color.CMYKModel:
		bpp = 8 // YCbCr + K, then CMYK
	case color.YCbCrModel:
		bpp = 3
	}
	if _, ok := cfg.ColorModel.(color.Palette); ok {
		bpp = 1
	}
	switch format {
	case "jpeg":
		if progressiveJPEG(b) {
			comps := int64(3)
			switch cfg.ColorModel {
			case color.GrayModel:
				comps = 1
			case color.CMYKModel:
				comps = 4
			}
			bpp += 4 * comps
		}
	case "png":
		if len(b) > 28 && b[28] == 1 { // IHDR's interlace method: Adam7
			bpp *= 2
		}
	case "webp":
		bpp = max(bpp, 8) // lossless: NRGBA and its transforms' buffers
	}
	return px*(bpp+4) + decoderOverhead
}

// decoderOverhead is what a decoder allocates whatever the image's size (Huffman and inflate
// tables, readers, VP8's per-frame state): a 150x100 lossy WebP with an alpha chunk, found by
// FuzzReference, allocated 560 KB, of which its pixels account for at most 180 KB.
const decoderOverhead = 1 << 20

// progressiveJPEG says whether the JPEG b has a progressive frame header (SOF2) among its
// markers before the first scan.
func progressiveJPEG(b []byte) bool {
	for i := 2; i+3 < len(b); {
		if b[i] != 0xFF {
			return false
		}
		m := b[i+1]
		switch {
		case m == 0xFF: // fill byte
			i++
			continue
		case m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE:
			return true
		case m == 0xDA: // start of scan: the frame header came before it
			return false
		case m == 0xD8 || (m >= 0xD0 && m <= 0xD7) || m == 0x01:
			i += 2
			continue
		}
		i += 2 + (int(b[i+2])<<8 | int(b[i+3]))
	}
	return false
}

// checkImage reads an upload's header: its size and its decode cost.
func checkImage(b []byte) (image.Config, int64, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return cfg, 0, err
	}
	return cfg, decodeCost(b, cfg, format), nil
}

// excerptBytes bounds how much of a client's input any message quotes.
const excerptBytes = 64

// excerpt is s cut to excerptBytes, saying how long it was.
func excerpt(s string) string { return cut(s, excerptBytes) }
