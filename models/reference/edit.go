package reference

import (
	"context"
	"image"
	"strings"
	"time"
	"unicode"

	xdraw "golang.org/x/image/draw"

	"github.com/mediaqual/mediaqual/models/spec"
)

type opKind int

const (
	opGray opKind = iota
	opInvert
	opSepia
	opRotate
	opMirror
	opFlip
	opBlur
	opPosterize
	opTint
)

type editOp struct {
	kind    opKind
	quarter int        // opRotate: clockwise quarter turns, 1..3
	colour  [3]float64 // opTint
}

func (o editOp) geometric() bool { return o.kind == opRotate || o.kind == opMirror || o.kind == opFlip }

const vocabulary = "grayscale/greyscale, invert, sepia, rotate [90|180|270], mirror, flip, blur, posterize, " +
	"tint <red|green|blue|yellow|cyan|magenta|orange|purple>"

func unsupported(msg string) error {
	return &spec.Error{Code: "unsupported_instruction", Message: msg + "; supported edits: " + vocabulary, BadInput: true, Param: "prompt"}
}

func tintColour(word string) ([3]float64, bool) {
	switch word {
	case "red":
		return [3]float64{255, 0, 0}, true
	case "green":
		return [3]float64{0, 255, 0}, true
	case "blue":
		return [3]float64{0, 0, 255}, true
	case "yellow":
		return [3]float64{255, 255, 0}, true
	case "cyan":
		return [3]float64{0, 255, 255}, true
	case "magenta":
		return [3]float64{255, 0, 255}, true
	case "orange":
		return [3]float64{255, 165, 0}, true
	case "purple":
		return [3]float64{128, 0, 128}, true
	}
	return [3]float64{}, false
}

// classify reports which vocabulary word w starts with. "flip" is returned as opFlip;
// the caller decides whether a following "horizontally" makes it a mirror.
func classify(w string) (opKind, bool) {
	for _, v := range []struct {
		stem string
		kind opKind
	}{
		{"grayscale", opGray}, {"greyscale", opGray}, {"invert", opInvert}, {"sepia", opSepia},
		{"rotat", opRotate}, {"mirror", opMirror}, {"flip", opFlip}, {"blur", opBlur},
		{"posteriz", opPosterize}, {"posteris", opPosterize}, {"tint", opTint},
	} {
		if strings.HasPrefix(w, v.stem) {
			return v.kind, true
		}
	}
	return 0, false
}

// argWords is how far past a vocabulary word its argument (angle, colour) may be, so that
// "rotate the image by 180 degrees" and "tint it red" work.
const argWords = 4

// args returns the words after a vocabulary word, up to argWords and the next vocabulary word.
func args(next []string) []string {
	next = next[:min(argWords, len(next))]
	for i, w := range next {
		if _, ok := classify(w); ok {
			return next[:i]
		}
	}
	return next
}

// parseInstruction turns a prompt into edit operations in the order their words appear.
func parseInstruction(prompt string) ([]editOp, error) {
	words := strings.FieldsFunc(strings.ToLower(prompt), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	var ops []editOp
	for i, w := range words {
		kind, ok := classify(w)
		if !ok {
			continue
		}
		op := editOp{kind: kind}
		switch kind {
		case opRotate:
			q, err := parseRotation(args(words[i+1:]))
			if err != nil {
				return nil, err
			}
			op.quarter = q
		case opFlip:
			// "flip horizontally" is how people ask for a mirror; honour it rather than
			// silently flipping the other way.
			if a := args(words[i+1:]); len(a) > 0 && strings.HasPrefix(a[0], "horizontal") {
				op.kind = opMirror
			}
		case opTint:
			found := false
			for _, c := range args(words[i+1:]) {
				if op.colour, found = tintColour(c); found {
					break
				}
			}
			if !found {
				return nil, unsupported("tint needs a colour right after it")
			}
		}
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return nil, unsupported("no supported edit in the instruction")
	}
	return ops, nil
}

// parseRotation reads the angle and direction among the words after "rotate"; no angle
// means 90, and the direction is clockwise unless a counterclockwise word appears.
func parseRotation(a []string) (int, error) {
	q, ccw := 1, false
	for _, w := range a {
		switch w {
		case "counterclockwise", "anticlockwise", "ccw", "counter", "anti":
			ccw = true
		case "90":
			q = 1
		case "180":
			q = 2
		case "270":
			q = 3
		default:
			if strings.TrimLeft(w, "0123456789") == "" {
				return 0, unsupported("rotation angle " + w + " is not 90, 180 or 270")
			}
		}
	}
	if ccw {
		q = 4 - q
	}
	return q, nil
}

// editTask is ref-edit. Stateless, so one value serves concurrent Runs.
type editTask struct{}

func (editTask) Run(ctx context.Context, req spec.Request) (spec.Output, error) {
	start := time.Now()
	s := req.Settings
	if err := checkImage(s); err != nil {
		return spec.Output{}, err
	}
	if req.Reference == nil || req.Reference.Bounds().Empty() {
		return spec.Output{}, invalid("image_edit needs a non-empty reference image")
	}
	if rb := req.Reference.Bounds(); rb.Dx() > maxDim || rb.Dy() > maxDim {
		return spec.Output{}, invalid("reference %dx%d larger than %d per side", rb.Dx(), rb.Dy(), maxDim)
	}
	ops, err := parseInstruction(s.Prompt)
	if err != nil {
		return spec.Output{}, err
	}
	if err := ctx.Err(); err != nil {
		return spec.Output{}, err
	}
	out := editImage(ctx, req.Reference, ops, s, req.Progress)
	if out == nil {
		return spec.Output{}, ctx.Err()
	}
	return spec.Output{Frames: []*image.RGBA{out}, Actual: imageActual(s), TaskWall: time.Since(start)}, nil
}

// editImage returns nil only when ctx was cancelled between steps.
func editImage(ctx context.Context, ref image.Image, ops []editOp, s spec.Settings, progress func(int, int)) *image.RGBA {
	// Geometry commutes with every colour operation here (all are per pixel or symmetric
	// blurs), so applying it first, at the reference's resolution, keeps the word order's
	// meaning and lets quarter turns land exactly on req.Size after the resize.
	src := toRGBA(ref)
	for _, o := range ops {
		switch o.kind {
		case opRotate:
			for range o.quarter {
				src = rotateCW(src)
			}
		case opMirror:
			src = mirrorRGBA(src)
		case opFlip:
			src = flipRGBA(src)
		}
	}
	w, h := s.Size.W, s.Size.H
	base := src
	if src.Rect.Dx() != w || src.Rect.Dy() != h {
		base = newFrame(s.Size)
		xdraw.CatmullRom.Scale(base, base.Rect, src, src.Rect, xdraw.Src, nil)
	}
	g := make([]float64, w*h*3) // the unedited, geometrically transformed base
	for i, j := 0, 0; j < len(g); i, j = i+4, j+3 {
		g[j], g[j+1], g[j+2] = float64(base.Pix[i]), float64(base.Pix[i+1]), float64(base.Pix[i+2])
	}
	e := make([]float64, len(g))
	copy(e, g)
	for _, o := range ops {
		if !o.geometric() {
			applyColour(e, w, h, o)
		}
	}
	// guidance_scale scales the colour edit like classifier-free guidance: 0 = unedited,
	// 1 = nominal, >1 extrapolates.
	for i := range e {
		e[i] = g[i] + s.Guidance*(e[i]-g[i])
	}

	out := newFrame(s.Size)
	for i, j := 0, 0; j < len(g); i, j = i+4, j+3 {
		out.Pix[i], out.Pix[i+1], out.Pix[i+2], out.Pix[i+3] = quant(g[j]), quant(g[j+1]), quant(g[j+2]), 255
	}
	carry := make([]float64, len(g))
	seedKey := mix64(uint64(s.Seed)*golden ^ 0x646974686572) // "dither"
	n := float64(s.Steps)
	prev := 0.0
	for step := 1; step <= s.Steps; step++ {
		if ctx.Err() != nil {
			return nil
		}
		r := 1 - float64(step)/n
		sigma := 1 - r*r
		wgt := (sigma - prev) / (1 - prev)
		prev = sigma
		ditherPass(out.Pix, e, carry, wgt, seedKey^mix64(uint64(step)))
		if progress != nil {
			progress(step, s.Steps)
		}
	}
	return out
}

// ditherPass moves the 8-bit image a fraction wgt toward e, requantising with a seeded dither
// of ±0.5 level and carrying each channel's rounding error (bounded to ±1) into the next pass.
// The bound keeps the final image within 2 levels of the edit whatever seed and steps are.
func ditherPass(pix []byte, e, carry []float64, wgt float64, key uint64) {
	for i, j := 0, 0; j < len(e); i, j = i+4, j+3 {
		n := mix64(key + uint64(j))
		for c := range 3 {
			cur := float64(pix[i+c])
			v := cur + wgt*(e[j+c]-cur) + carry[j+c]
			d := float64((n>>(16*c))&0xffff)/65536 - 0.5
			o := quant(v + d)
			carry[j+c] = min(max(v-float64(o), -1), 1)
			pix[i+c] = o
		}
	}
}

// toRGBA copies any image into an origin-based RGBA; transparency is flattened onto black
// (the premultiplied colour), since outputs are opaque.
func toRGBA(m image.Image) *image.RGBA {
	b := m.Bounds()
	out := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	if rgb, ok := m.(*spec.RGB); ok && rgb.Stride == 3*b.Dx() { // how the server decodes an RGB PNG
		spec.ExpandRGB(out.Pix, rgb.Pix)
		return out
	}
	xdraw.Draw(out, out.Rect, m, b.Min, xdraw.Src)
	for i := 3; i < len(out.Pix); i += 4 {
		out.Pix[i] = 255
	}
	return out
}

func rotateCW(m *image.RGBA) *image.RGBA {
	w, h := m.Rect.Dx(), m.Rect.Dy()
	out := image.NewRGBA(image.Rect(0, 0, h, w))
	for y := range h {
		for x := range w {
			// (x, y) lands at (h-1-y, x).
			copy(out.Pix[x*out.Stride+(h-1-y)*4:][:4], m.Pix[y*m.Stride+x*4:][:4])
		}
	}
	return out
}

func mirrorRGBA(m *image.RGBA) *image.RGBA {
	w, h := m.Rect.Dx(), m.Rect.Dy()
	out := image.NewRGBA(m.Rect)
	for y := range h {
		for x := range w {
			copy(out.Pix[y*out.Stride+(w-1-x)*4:][:4], m.Pix[y*m.Stride+x*4:][:4])
		}
	}
	return out
}

func flipRGBA(m *image.RGBA) *image.RGBA {
	h := m.Rect.Dy()
	out := image.NewRGBA(m.Rect)
	for y := range h {
		copy(out.Pix[(h-1-y)*out.Stride:][:out.Stride], m.Pix[y*m.Stride:][:m.Stride])
	}
	return out
}

func applyColour(p []float64, w, h int, o editOp) {
	switch o.kind {
	case opGray:
		for i := 0; i < len(p); i += 3 {
			l := 0.299*p[i] + 0.587*p[i+1] + 0.114*p[i+2]
			p[i], p[i+1], p[i+2] = l, l, l
		}
	case opInvert:
		for i := range p {
			p[i] = 255 - p[i]
		}
	case opSepia:
		for i := 0; i < len(p); i += 3 {
			r, g, b := p[i], p[i+1], p[i+2]
			p[i] = min(255, 0.393*r+0.769*g+0.189*b)
			p[i+1] = min(255, 0.349*r+0.686*g+0.168*b)
			p[i+2] = min(255, 0.272*r+0.534*g+0.131*b)
		}
	case opBlur:
		r := max(2, min(w, h)/64)
		tmp := make([]float64, len(p))
		for range 2 {
			boxBlur(p, tmp, w, h, r, 3, w*3) // along rows
			boxBlur(p, tmp, h, w, r, w*3, 3) // along columns
		}
	case opPosterize:
		for i := range p {
			p[i] = float64(int(clamp01(p[i]/255)*3+0.5)) * 85
		}
	case opTint:
		for i := 0; i < len(p); i += 3 {
			for c := range 3 {
				p[i+c] = 0.65*p[i+c] + 0.35*o.colour[c]
			}
		}
	}
}

// boxBlur averages each channel over a window of 2r+1 samples along lines of length n
// (sample step `step`), for `lines` lines starting `lineStep` apart; edges are clamped.
// tmp must be as long as p.
func boxBlur(p, tmp []float64, n, lines, r, step, lineStep int) {
	copy(tmp, p)
	inv := 1 / float64(2*r+1)
	for l := range lines {
		off := l * lineStep
		for c := range 3 {
			at := func(k int) float64 { return tmp[off+min(max(k, 0), n-1)*step+c] }
			var sum float64
			for k := -r; k <= r; k++ {
				sum += at(k)
			}
			for k := range n {
				p[off+k*step+c] = sum * inv
				sum += at(k+r+1) - at(k-r)
			}
		}
	}
}
