package reference

import (
	"context"
	"image"
	"math"

	"github.com/mediaqual/mediaqual/models/spec"
)

// shape moves along c + a·sin(ω t + φ) per axis in normalised coordinates, or, when orbit is
// set, once round an ellipse per clip so that clip length reaches every frame.
type shape struct {
	circle         bool
	orbit          bool
	col            [3]float64
	size, aspect   float64 // radius (or half height) as a fraction of min(W,H); rect width ratio
	cx, cy, ax, ay float64
	wx, wy, px, py float64
}

type scene struct {
	bg0, bg1   [3]float64
	dirX, dirY float64 // gradient direction, unit length
	waveK      float64 // band frequency along the gradient, cycles per unit
	waveW      float64 // band drift, rad/s: the global motion that keeps frame differences large
	waveA      float64
	shapes     []shape
}

func hsv(h, s, v float64) [3]float64 {
	h = math.Mod(h, 1)
	if h < 0 {
		h++
	}
	i := math.Floor(h * 6)
	f := h*6 - i
	p, q, t := v*(1-s), v*(1-s*f), v*(1-s*(1-f))
	var r, g, b float64
	switch int(i) % 6 {
	case 0:
		r, g, b = v, t, p
	case 1:
		r, g, b = q, v, p
	case 2:
		r, g, b = p, v, t
	case 3:
		r, g, b = p, q, v
	case 4:
		r, g, b = t, p, v
	default:
		r, g, b = v, p, q
	}
	return [3]float64{r * 255, g * 255, b * 255}
}

func newScene(key uint64) scene {
	r := rng{s: key}
	hue := r.float()
	ang := r.between(0, 2*math.Pi)
	sc := scene{
		bg0:   hsv(hue+0.5, r.between(0.4, 0.7), r.between(0.15, 0.3)),
		bg1:   hsv(hue+r.between(0.55, 0.75), r.between(0.35, 0.6), r.between(0.75, 0.95)),
		dirX:  math.Cos(ang),
		dirY:  math.Sin(ang),
		waveK: r.between(1.5, 3.5),
		waveW: r.between(3, 6),
		waveA: r.between(0.18, 0.28),
	}
	n := 3 + int(r.next()%3)
	for i := range n {
		sh := shape{
			circle: r.next()&1 == 0,
			col:    hsv(hue+float64(i)*0.618, r.between(0.6, 0.95), r.between(0.75, 1)),
			size:   r.between(0.08, 0.18),
			aspect: r.between(0.6, 1.8),
			cx:     r.between(0.3, 0.7),
			cy:     r.between(0.3, 0.7),
			ax:     r.between(0.15, 0.3),
			ay:     r.between(0.15, 0.3),
			wx:     r.between(1.5, 4) * sign(r.next()),
			wy:     r.between(1.5, 4) * sign(r.next()),
			px:     r.between(0, 2*math.Pi),
			py:     r.between(0, 2*math.Pi),
		}
		sh.orbit = i == n-1
		sc.shapes = append(sc.shapes, sh)
	}
	return sc
}

func sign(u uint64) float64 {
	if u&1 == 0 {
		return 1
	}
	return -1
}

func clamp01(v float64) float64 { return min(max(v, 0), 1) }

// edgeWidth makes detail a function of steps, the way more denoising steps sharpen a real
// sampler's output; it also keeps steps visible in the bytes once the noise has gone.
func edgeWidth(steps int) float64 { return 0.75 + 6/float64(steps) }

// render draws the noiseless target for time t into out (packed RGB). buf is W*H*3 scratch.
// dur is the clip duration; the orbiting shape completes one turn per dur seconds. sat scales
// saturation about each pixel's luma; the families map guidance onto it.
func (sc *scene) render(w, h int, t, dur, edge, sat float64, buf []float64, out []byte) {
	fw, fh := float64(w), float64(h)
	k := 2 * math.Pi * sc.waveK
	phase := sc.waveW * t
	for y := range h {
		ny := (float64(y)+0.5)/fh - 0.5
		row := buf[y*w*3 : (y+1)*w*3]
		for x := range w {
			u := ((float64(x)+0.5)/fw-0.5)*sc.dirX + ny*sc.dirY
			m := clamp01(0.5 + 0.6*u + sc.waveA*math.Sin(k*u-phase))
			p := row[x*3 : x*3+3]
			p[0] = sc.bg0[0] + m*(sc.bg1[0]-sc.bg0[0])
			p[1] = sc.bg0[1] + m*(sc.bg1[1]-sc.bg0[1])
			p[2] = sc.bg0[2] + m*(sc.bg1[2]-sc.bg0[2])
		}
	}
	unit := math.Min(fw, fh)
	for i := range sc.shapes {
		sh := &sc.shapes[i]
		var cx, cy float64
		if sh.orbit {
			a := sh.px
			if dur > 0 {
				a += 2 * math.Pi * t / dur
			}
			cx, cy = sh.cx+sh.ax*math.Cos(a), sh.cy+sh.ay*math.Sin(a)
		} else {
			cx, cy = sh.cx+sh.ax*math.Sin(sh.wx*t+sh.px), sh.cy+sh.ay*math.Sin(sh.wy*t+sh.py)
		}
		cx, cy = cx*fw, cy*fh
		hy := sh.size * unit
		hx := hy
		if !sh.circle {
			hx = hy * sh.aspect
		}
		x0, x1 := max(0, int(cx-hx-edge-1)), min(w, int(cx+hx+edge+2))
		y0, y1 := max(0, int(cy-hy-edge-1)), min(h, int(cy+hy+edge+2))
		for y := y0; y < y1; y++ {
			dy := float64(y) + 0.5 - cy
			for x := x0; x < x1; x++ {
				dx := float64(x) + 0.5 - cx
				var d float64
				if sh.circle {
					d = math.Hypot(dx, dy) - hy
				} else {
					qx, qy := math.Abs(dx)-hx, math.Abs(dy)-hy
					d = math.Hypot(math.Max(qx, 0), math.Max(qy, 0)) + math.Min(math.Max(qx, qy), 0)
				}
				cov := clamp01(0.5 - d/edge)
				if cov == 0 {
					continue
				}
				p := buf[(y*w+x)*3 : (y*w+x)*3+3]
				p[0] += cov * (sh.col[0] - p[0])
				p[1] += cov * (sh.col[1] - p[1])
				p[2] += cov * (sh.col[2] - p[2])
			}
		}
	}
	for i := 0; i < w*h; i++ {
		p := buf[i*3 : i*3+3]
		l := 0.299*p[0] + 0.587*p[1] + 0.114*p[2]
		out[i*3] = quant(l + (p[0]-l)*sat)
		out[i*3+1] = quant(l + (p[1]-l)*sat)
		out[i*3+2] = quant(l + (p[2]-l)*sat)
	}
}

func quant(v float64) byte {
	if v <= 0 {
		return 0
	}
	if v >= 255 {
		return 255
	}
	return byte(v + 0.5)
}

// clipParams is what renderClip needs; t2i passes one frame at t = 0.
type clipParams struct {
	prompt   string
	seed     int64
	size     spec.Size
	frames   int
	fps      int
	steps    int
	sat      float64
	progress func(done, total int)
	final    func(f int, frame *image.RGBA) // frame f is final (its last step is done)
}

// renderClip runs the shared sampler: every frame starts as seeded noise, and each step is a
// full pass over the whole clip (as in a video diffusion sampler, where a step denoises all
// frames) that removes two thirds of the remaining distance to the procedural target.
func renderClip(ctx context.Context, p clipParams) ([]*image.RGBA, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := promptKey(p.prompt, p.seed)
	sc := newScene(key)
	noiseKey := mix64(key ^ 0x6e6f697365) // "noise"
	w, h := p.size.W, p.size.H
	edge := edgeWidth(p.steps)
	dur := float64(p.frames) / float64(p.fps)
	buf := make([]float64, w*h*3)
	targets := make([][]byte, p.frames)
	frames := make([]*image.RGBA, p.frames)
	for f := range p.frames {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		targets[f] = make([]byte, w*h*3)
		sc.render(w, h, float64(f)/float64(p.fps), dur, edge, p.sat, buf, targets[f])
		frames[f] = newFrame(p.size)
		fillNoise(frames[f].Pix, noiseKey, f)
	}
	for s := 1; s <= p.steps; s++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for f := range frames {
			refine(frames[f].Pix, targets[f])
			if s == p.steps && p.final != nil {
				p.final(f, frames[f])
			}
		}
		if p.progress != nil {
			p.progress(s, p.steps)
		}
	}
	return frames, nil
}

func fillNoise(pix []byte, key uint64, frame int) {
	base := key ^ uint64(frame)<<40
	for i := 0; i < len(pix); i += 4 {
		n := mix64(base + uint64(i))
		pix[i], pix[i+1], pix[i+2], pix[i+3] = byte(n), byte(n>>8), byte(n>>16), 255
	}
}

// refine moves each channel two thirds of the way to the target in integer arithmetic, so the
// result is exact across platforms; residual noise of ±1 level can remain, as grain.
func refine(pix, target []byte) {
	for i, j := 0, 0; i < len(pix); i, j = i+4, j+3 {
		for c := range 3 {
			v := int(pix[i+c])
			v += 2 * (int(target[j+c]) - v) / 3
			pix[i+c] = byte(v)
		}
	}
}
