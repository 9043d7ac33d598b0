package media

import (
	"fmt"
	"image"
	"image/color"
	"math"
)

// Image metrics for comparing outputs with references and with each other. All work on
// 8-bit RGB with alpha ignored (as ffmpeg's rgb24 conversion ignores it), so a PNG and
// a decoded video frame of the same picture compare equal. They take two images of the
// same size, whatever their origins, and fail otherwise: a size mismatch is a finding,
// not something to paper over by cropping.

// rgb returns img's pixels as interleaved 8-bit R, G, B, row-major from its top left.
func rgb(img image.Image) (w, h int, pix []uint8) {
	b := img.Bounds()
	w, h = b.Dx(), b.Dy()
	pix = make([]uint8, 0, 3*w*h)
	switch m := img.(type) {
	case *image.RGBA:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := m.Pix[m.PixOffset(b.Min.X, y):][:4*w]
			for x := 0; x < len(row); x += 4 {
				if a := row[x+3]; a != 0xff {
					// Premultiplied: recover the straight colour, as NRGBA would hold it.
					c := color.NRGBAModel.Convert(color.RGBA{row[x], row[x+1], row[x+2], a}).(color.NRGBA)
					pix = append(pix, c.R, c.G, c.B)
					continue
				}
				pix = append(pix, row[x], row[x+1], row[x+2])
			}
		}
	case *image.NRGBA:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := m.Pix[m.PixOffset(b.Min.X, y):][:4*w]
			for x := 0; x < len(row); x += 4 {
				pix = append(pix, row[x], row[x+1], row[x+2])
			}
		}
	case *image.Gray:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for _, v := range m.Pix[m.PixOffset(b.Min.X, y):][:w] {
				pix = append(pix, v, v, v)
			}
		}
	default:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
				pix = append(pix, c.R, c.G, c.B)
			}
		}
	}
	return w, h, pix
}

// pair converts two images for comparison, insisting on equal, non-empty sizes.
func pair(a, b image.Image) (w, h int, pa, pb []uint8, err error) {
	sa, sb := a.Bounds().Size(), b.Bounds().Size()
	if sa != sb {
		return 0, 0, nil, nil, fmt.Errorf("image sizes differ: %dx%d vs %dx%d", sa.X, sa.Y, sb.X, sb.Y)
	}
	if sa.X <= 0 || sa.Y <= 0 {
		return 0, 0, nil, nil, fmt.Errorf("empty image %dx%d", sa.X, sa.Y)
	}
	w, h, pa = rgb(a)
	_, _, pb = rgb(b)
	return w, h, pa, pb, nil
}

// MeanAbsDiff is the mean absolute difference over all R, G and B samples, on the
// 0..255 scale: 0 for identical pictures, 255 for black against white.
func MeanAbsDiff(a, b image.Image) (float64, error) {
	_, _, pa, pb, err := pair(a, b)
	if err != nil {
		return 0, err
	}
	return meanAbsDiff(pa, pb), nil
}

func meanAbsDiff(pa, pb []uint8) float64 {
	var sum uint64
	for i := range pa {
		d := int(pa[i]) - int(pb[i])
		if d < 0 {
			d = -d
		}
		sum += uint64(d)
	}
	return float64(sum) / float64(len(pa))
}

// PSNR is the peak signal-to-noise ratio in dB over all R, G and B samples together
// (one MSE over the three channels, peak 255), which is what ffmpeg's psnr filter
// reports as "average" for rgb24 input. Identical images give +Inf.
func PSNR(a, b image.Image) (float64, error) {
	_, _, pa, pb, err := pair(a, b)
	if err != nil {
		return 0, err
	}
	var sum uint64
	for i := range pa {
		d := int64(pa[i]) - int64(pb[i])
		sum += uint64(d * d)
	}
	if sum == 0 {
		return math.Inf(1), nil
	}
	mse := float64(sum) / float64(len(pa))
	return 10 * math.Log10(255*255/mse), nil
}

// SSIM constants of Wang et al. for 8-bit samples.
const (
	ssimC1 = (0.01 * 255) * (0.01 * 255)
	ssimC2 = (0.03 * 255) * (0.03 * 255)
)

// SSIM is the structural similarity of the two images' luma (BT.601: 0.299 R +
// 0.587 G + 0.114 B, full range), 1 for identical images. Windows are 8x8 boxes
// stepped by 4 pixels, the layout of x264 and ffmpeg's ssim filter, so results are
// comparable with ffmpeg's; the constants are the standard C1 = (0.01*255)^2 and
// C2 = (0.03*255)^2 with population statistics (ffmpeg's x264-derived code effectively
// uses C1/64 and 63/64*C2; see the tests for the size of the difference). The score is
// the mean over windows. Images under 8 pixels on a side are one window of their own.
func SSIM(a, b image.Image) (float64, error) {
	w, h, pa, pb, err := pair(a, b)
	if err != nil {
		return 0, err
	}
	return ssimPlane(luma(pa), luma(pb), w, h, ssimC1, ssimC2), nil
}

// ssimPlane is SSIM of two w x h planes with constants c1, c2 (see SSIM).
func ssimPlane(ya, yb []float64, w, h int, c1, c2 float64) float64 {
	if w < 8 || h < 8 {
		return ssimWindow(ya, yb, w, 0, 0, w, h, c1, c2)
	}
	// Sums over 4x4 blocks, then each 8x8 window is 2x2 blocks.
	bw, bh := w/4, h/4
	type sums struct{ a, b, aa, bb, ab float64 }
	blocks := make([]sums, bw*bh)
	for by := range bh {
		for bx := range bw {
			var s sums
			for y := 4 * by; y < 4*by+4; y++ {
				for x := 4 * bx; x < 4*bx+4; x++ {
					va, vb := ya[y*w+x], yb[y*w+x]
					s.a += va
					s.b += vb
					s.aa += va * va
					s.bb += vb * vb
					s.ab += va * vb
				}
			}
			blocks[by*bw+bx] = s
		}
	}
	var total float64
	for by := 0; by+1 < bh; by++ {
		for bx := 0; bx+1 < bw; bx++ {
			var s sums
			for _, q := range [4]sums{blocks[by*bw+bx], blocks[by*bw+bx+1], blocks[(by+1)*bw+bx], blocks[(by+1)*bw+bx+1]} {
				s.a += q.a
				s.b += q.b
				s.aa += q.aa
				s.bb += q.bb
				s.ab += q.ab
			}
			total += ssimStats(s.a, s.b, s.aa, s.bb, s.ab, 64, c1, c2)
		}
	}
	return total / float64((bw-1)*(bh-1))
}

// luma is BT.601 Y of interleaved RGB, unrounded.
func luma(p []uint8) []float64 {
	y := make([]float64, len(p)/3)
	for i := range y {
		y[i] = 0.299*float64(p[3*i]) + 0.587*float64(p[3*i+1]) + 0.114*float64(p[3*i+2])
	}
	return y
}

// ssimWindow is SSIM over the single window [x0, x1) x [y0, y1) of planes of width stride.
func ssimWindow(ya, yb []float64, stride, x0, y0, x1, y1 int, c1, c2 float64) float64 {
	var a, b, aa, bb, ab float64
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			va, vb := ya[y*stride+x], yb[y*stride+x]
			a += va
			b += vb
			aa += va * va
			bb += vb * vb
			ab += va * vb
		}
	}
	return ssimStats(a, b, aa, bb, ab, float64((x1-x0)*(y1-y0)), c1, c2)
}

// ssimStats is SSIM from the sums over a window of n samples.
func ssimStats(a, b, aa, bb, ab, n, c1, c2 float64) float64 {
	ma, mb := a/n, b/n
	va := aa/n - ma*ma
	vb := bb/n - mb*mb
	cov := ab/n - ma*mb
	return (2*ma*mb + c1) * (2*cov + c2) / ((ma*ma + mb*mb + c1) * (va + vb + c2))
}

// Motion is the MeanAbsDiff between each pair of consecutive frames: len(frames)-1
// values, near 0 for a still clip, larger where the picture changes.
func Motion(frames []*image.RGBA) ([]float64, error) {
	if len(frames) < 2 {
		return nil, nil
	}
	out := make([]float64, len(frames)-1)
	_, _, prev := rgb(frames[0])
	for i := 1; i < len(frames); i++ {
		if frames[i].Bounds().Size() != frames[0].Bounds().Size() {
			return nil, fmt.Errorf("frame %d is %v, frame 0 %v", i, frames[i].Bounds().Size(), frames[0].Bounds().Size())
		}
		_, _, cur := rgb(frames[i])
		out[i-1] = meanAbsDiff(prev, cur)
		prev = cur
	}
	return out, nil
}

// ChannelStdDev is the population standard deviation of each of R, G and B over the
// image (0..255 scale); all three near 0 means a flat, single-colour picture.
func ChannelStdDev(img image.Image) [3]float64 {
	_, _, p := rgb(img)
	var out [3]float64
	n := float64(len(p) / 3)
	if n == 0 {
		return out
	}
	for c := range 3 {
		var s, ss float64
		for i := c; i < len(p); i += 3 {
			v := float64(p[i])
			s += v
			ss += v * v
		}
		m := s / n
		out[c] = math.Sqrt(max(ss/n-m*m, 0))
	}
	return out
}

// IsBlank reports whether every channel's standard deviation is at most tolerance:
// a blank (black, white, or any single colour) picture. The caller picks tolerance;
// compression noise on a flat picture is typically a few units.
func IsBlank(img image.Image, tolerance float64) bool {
	for _, s := range ChannelStdDev(img) {
		if s > tolerance {
			return false
		}
	}
	return true
}

// BoxMeans is img reduced to the means of its k x k boxes (edge boxes are smaller), rounded: a
// picture's coarse content, which pixel noise (a nondeterministic kernel's) hardly moves.
func BoxMeans(img *image.RGBA, k int) *image.RGBA {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	out := image.NewRGBA(image.Rect(0, 0, (w+k-1)/k, (h+k-1)/k))
	for by := 0; by*k < h; by++ {
		for bx := 0; bx*k < w; bx++ {
			var sum [3]int
			n := 0
			for y := by * k; y < min(by*k+k, h); y++ {
				row := img.Pix[y*img.Stride:]
				for x := bx * k; x < min(bx*k+k, w); x++ {
					for c := range 3 {
						sum[c] += int(row[4*x+c])
					}
					n++
				}
			}
			o := out.PixOffset(bx, by)
			for c := range 3 {
				out.Pix[o+c] = uint8((sum[c] + n/2) / n)
			}
			out.Pix[o+3] = 255
		}
	}
	return out
}
