package reports

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"

	xdraw "golang.org/x/image/draw"
)

// Kinds of Picture.
const (
	ContactSheetKind = "contact-sheet"
	EditStripKind    = "edit-strip"
	LatencyKind      = "latency"
)

// Picture is an image written next to a report and shown with its row.
type Picture struct {
	Kind  string `json:"kind"` // ContactSheetKind, EditStripKind or LatencyKind
	Title string `json:"title"`
	Path  string `json:"path"` // relative to the report directory, slash-separated
	// Source is where the file is while it may not be under the report directory yet (an
	// absolute path, set by whoever drew it): WriteFiles copies it to Path under the directory
	// it writes, whichever that is. Never in results.json, whose pictures are under it.
	Source string `json:"-"`
}

// MaxPictureWidth bounds the width of every picture this package draws.
const MaxPictureWidth = 1600

// DiffGain is how much EditStrip amplifies the absolute difference it shows.
const DiffGain = 4

var (
	paper  = color.RGBA{0xff, 0xff, 0xff, 0xff}
	ink    = color.RGBA{0x1b, 0x1f, 0x24, 0xff}
	muted  = color.RGBA{0x57, 0x60, 0x6a, 0xff}
	rule   = color.RGBA{0xd0, 0xd7, 0xde, 0xff}
	faint  = color.RGBA{0xee, 0xf1, 0xf4, 0xff}
	client = color.RGBA{0x1f, 0x6f, 0xd1, 0xff} // blue
	task   = color.RGBA{0xe0, 0x7b, 0x12, 0xff} // orange
)

var (
	fontOnce      sync.Once
	regular, bold *opentype.Font
	fontErr       error
)

// faces returns fresh regular and bold Go-font faces of the given pixel size (an opentype
// Face is not safe for concurrent use, so each picture gets its own).
func faces(px float64) (font.Face, font.Face, error) {
	fontOnce.Do(func() {
		if regular, fontErr = opentype.Parse(goregular.TTF); fontErr == nil {
			bold, fontErr = opentype.Parse(gobold.TTF)
		}
	})
	if fontErr != nil {
		return nil, nil, fontErr
	}
	opts := &opentype.FaceOptions{Size: px, DPI: 72, Hinting: font.HintingFull}
	r, err := opentype.NewFace(regular, opts)
	if err != nil {
		return nil, nil, err
	}
	b, err := opentype.NewFace(bold, opts)
	return r, b, err
}

// text draws s with its baseline at (x, y) and returns its width in pixels.
func text(dst draw.Image, face font.Face, x, y int, c color.Color, s string) int {
	d := font.Drawer{Dst: dst, Src: image.NewUniform(c), Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
	return d.Dot.X.Ceil() - x
}

func textWidth(face font.Face, s string) int { return font.MeasureString(face, s).Ceil() }

func fill(dst draw.Image, r image.Rectangle, c color.Color) {
	draw.Draw(dst, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// hatch draws diagonal stripes of c over r.
func hatch(dst *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(dst.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if (x+y)%8 < 3 {
				dst.SetRGBA(x, y, c)
			}
		}
	}
}

func newCanvas(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	fill(img, img.Bounds(), paper)
	return img
}

// fit returns the largest w×h with the aspect of sw×sh inside maxW×maxH, never upscaling.
func fit(sw, sh, maxW, maxH int) (int, int) {
	s := math.Min(1, math.Min(float64(maxW)/float64(sw), float64(maxH)/float64(sh)))
	return max(1, int(math.Round(float64(sw)*s))), max(1, int(math.Round(float64(sh)*s)))
}

func empty(img image.Image) bool { return img == nil || img.Bounds().Empty() }

// Contact sheet geometry.
const (
	sheetPad    = 10  // around and between tiles
	sheetHeader = 30  // title bar
	sheetLabel  = 22  // under each thumbnail
	sheetThumb  = 240 // the largest thumbnail side: five across fit a page
)

type sheetLayout struct {
	thumbW, thumbH int
	cols, rows     int
	width, height  int
}

func layoutSheet(frameW, frameH, count int) sheetLayout {
	l := sheetLayout{}
	l.thumbW, l.thumbH = fit(frameW, frameH, sheetThumb, sheetThumb)
	l.cols = max(1, min(count, (MaxPictureWidth-sheetPad)/(l.thumbW+sheetPad)))
	l.rows = (count + l.cols - 1) / l.cols
	l.cols = (count + l.rows - 1) / l.rows // balance the rows
	l.width = max(sheetPad+l.cols*(l.thumbW+sheetPad), 360)
	l.height = sheetHeader + l.rows*(l.thumbH+sheetLabel+sheetPad) + sheetPad
	return l
}

// tile is where the k-th thumbnail goes.
func (l sheetLayout) tile(k int) image.Rectangle {
	x := sheetPad + (k%l.cols)*(l.thumbW+sheetPad)
	y := sheetHeader + (k/l.cols)*(l.thumbH+sheetLabel+sheetPad)
	return image.Rect(x, y, x+l.thumbW, y+l.thumbH)
}

// pickFrames chooses up to n (at least 3) evenly spaced frame indices of total that always
// include the first, the middle ((total-1)/2) and the last; short clips give every frame once.
func pickFrames(total, n int) []int {
	n = max(n, 3)
	if n >= total {
		all := make([]int, total)
		for i := range all {
			all[i] = i
		}
		return all
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = int(math.Round(float64(i*(total-1)) / float64(n-1)))
	}
	mid, nearest := (total-1)/2, 1
	for j := 1; j < n-1; j++ {
		if abs(idx[j]-mid) < abs(idx[nearest]-mid) {
			nearest = j
		}
	}
	idx[nearest] = mid
	sort.Ints(idx)
	out := idx[:1]
	for _, v := range idx[1:] {
		if v != out[len(out)-1] {
			out = append(out, v)
		}
	}
	return out
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// ContactSheet lays out n evenly spaced frames of a clip in a grid, always including the
// first, middle and last frame (n below 3 counts as 3; a clip of n frames or fewer shows
// each frame once). Each thumbnail is labelled with its frame number, counted from 0 as
// ffmpeg does, and thumbnails are scaled down so the sheet is at most MaxPictureWidth wide.
func ContactSheet(frames []*image.RGBA, n int) (*image.RGBA, error) {
	if len(frames) == 0 {
		return nil, errors.New("contact sheet: no frames")
	}
	if n < 1 {
		return nil, fmt.Errorf("contact sheet: %d frames asked for", n)
	}
	for i, f := range frames {
		if f == nil || f.Bounds().Empty() {
			return nil, fmt.Errorf("contact sheet: frame %d is empty", i)
		}
	}
	reg, bld, err := faces(13)
	if err != nil {
		return nil, err
	}
	picked := pickFrames(len(frames), n)
	fb := frames[0].Bounds()
	l := layoutSheet(fb.Dx(), fb.Dy(), len(picked))
	img := newCanvas(l.width, l.height)
	fill(img, image.Rect(0, 0, l.width, sheetHeader-6), faint)
	text(img, bld, sheetPad, 18, ink, fmt.Sprintf("%d of %d frames, %dx%d (frames counted from 0)",
		len(picked), len(frames), fb.Dx(), fb.Dy()))
	mid := (len(frames) - 1) / 2
	for k, fi := range picked {
		t := l.tile(k)
		src := frames[fi]
		w, h := fit(src.Bounds().Dx(), src.Bounds().Dy(), t.Dx(), t.Dy())
		fill(img, t, faint)
		dr := image.Rect(0, 0, w, h).Add(t.Min).Add(image.Pt((t.Dx()-w)/2, (t.Dy()-h)/2))
		xdraw.CatmullRom.Scale(img, dr, src, src.Bounds(), xdraw.Src, nil)
		label := fmt.Sprintf("frame %d", fi)
		switch fi {
		case 0:
			label += " (first)"
		case len(frames) - 1:
			label += " (last)"
		case mid:
			label += " (middle)"
		}
		text(img, reg, t.Min.X, t.Max.Y+16, ink, label)
	}
	return img, nil
}

// toRGBA scales src to w×h.
func toRGBA(src image.Image, w, h int) *image.RGBA {
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	xdraw.BiLinear.Scale(dst, dst.Bounds(), src, src.Bounds(), xdraw.Src, nil)
	return dst
}

// EditStrip shows an edit: before | after | difference, at one height, each with a caption.
// The difference is |after − before| per channel, with before resized to after's size (as
// the suite's edit checks compare them), amplified DiffGain times; its caption gives the
// mean absolute difference (0..255) before amplification.
func EditStrip(before, after image.Image) (*image.RGBA, error) {
	if empty(before) {
		return nil, errors.New("edit strip: no before image")
	}
	if empty(after) {
		return nil, errors.New("edit strip: no after image")
	}
	reg, bld, err := faces(13)
	if err != nil {
		return nil, err
	}
	bb, ab := before.Bounds(), after.Bounds()
	aw, ah := ab.Dx(), ab.Dy()
	a := toRGBA(after, aw, ah)
	b := toRGBA(before, aw, ah)
	diff := image.NewRGBA(a.Bounds())
	var sum float64
	for i := 0; i < len(a.Pix); i += 4 {
		for c := range 3 {
			d := abs(int(a.Pix[i+c]) - int(b.Pix[i+c]))
			sum += float64(d)
			diff.Pix[i+c] = uint8(min(255, d*DiffGain))
		}
		diff.Pix[i+3] = 0xff
	}
	mean := sum / float64(3*aw*ah)

	const pad, caption, header = 10, 40, 4
	h := min(max(bb.Dy(), ah), 320)
	width := func(h int) int {
		return 4*pad + 2*int(math.Round(float64(aw*h)/float64(ah))) + int(math.Round(float64(bb.Dx()*h)/float64(bb.Dy())))
	}
	for width(h) > MaxPictureWidth && h > 16 {
		h--
	}
	type panel struct {
		img        image.Image
		title, sub string
	}
	panels := []panel{
		{before, "before (reference)", fmt.Sprintf("%dx%d", bb.Dx(), bb.Dy())},
		{a, "after (edited)", fmt.Sprintf("%dx%d", aw, ah)},
		{diff, fmt.Sprintf("difference |after − before| ×%d", DiffGain), fmt.Sprintf("mean %.1f of 255 per channel", mean)},
	}
	W := max(width(h), 480)
	img := newCanvas(W, header+caption+h+pad)
	x := pad
	for _, p := range panels {
		sb := p.img.Bounds()
		w := int(math.Round(float64(sb.Dx()*h) / float64(sb.Dy())))
		text(img, bld, x, header+17, ink, p.title)
		text(img, reg, x, header+33, muted, p.sub)
		r := image.Rect(x, header+caption, x+w, header+caption+h)
		xdraw.CatmullRom.Scale(img, r, p.img, sb, xdraw.Src, nil)
		x += w + pad
	}
	return img, nil
}

// LatencyPoint is one request's latency.
type LatencyPoint struct {
	Index    int
	ClientMS float64 // client end-to-end
	TaskMS   float64 // Task-call wall
	Warmup   bool
}

// niceStep is a 1, 2 or 5 × 10^k step that splits 0..top into about n intervals.
func niceStep(top float64, n int) float64 {
	raw := top / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

func msLabel(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.4g s", v/1000)
	}
	return fmt.Sprintf("%.4g ms", v)
}

// Latency chart geometry: margins around the plot, and its height.
const (
	chartLeft, chartRight, chartUpper, chartLower, chartH = 80, 20, 64, 46, 300
	chartMinW                                             = 560
)

// chartGeometry gives the chart's width and each request's slot in it: at most
// MaxPictureWidth wide up to 750 requests, wider beyond (each request keeps 2 px).
func chartGeometry(n int) (width, group int) {
	width = min(max(chartLeft+chartRight+48*n, chartMinW), MaxPictureWidth)
	group = max(2, (width-chartLeft-chartRight)/n)
	return max(width, chartLeft+chartRight+group*n), group
}

// LatencyChart draws one pair of bars per request, client end-to-end (blue) next to the
// Task call (orange), on a y axis in milliseconds. Warmup requests are hatched and labelled.
func LatencyChart(points []LatencyPoint) (*image.RGBA, error) {
	if len(points) == 0 {
		return nil, errors.New("latency chart: no points")
	}
	top := 0.0
	for _, p := range points {
		for _, v := range []float64{p.ClientMS, p.TaskMS} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return nil, fmt.Errorf("latency chart: request %d: latency %v ms", p.Index, v)
			}
			top = math.Max(top, v)
		}
	}
	if top == 0 {
		top = 1
	}
	step := niceStep(top, 5)
	top = math.Ceil(top/step) * step

	reg, bld, err := faces(13)
	if err != nil {
		return nil, err
	}
	W, group := chartGeometry(len(points))
	img := newCanvas(W, chartH)
	plot := image.Rect(chartLeft, chartUpper, chartLeft+group*len(points), chartH-chartLower)

	text(img, bld, 10, 20, ink, "Latency per request")
	// Legend.
	x := 10
	for _, l := range []struct {
		c     color.RGBA
		hatch bool
		name  string
	}{{client, false, "client end-to-end"}, {task, false, "Task call"}, {faint, true, "warmup (not measured)"}} {
		box := image.Rect(x, 32, x+14, 46)
		fill(img, box, l.c)
		if l.hatch {
			hatch(img, box, rule)
			fill(img, image.Rect(box.Min.X, box.Min.Y, box.Max.X, box.Min.Y+1), muted)
		}
		x += 20 + text(img, reg, x+20, 44, ink, l.name) + 24
	}

	// Warmup backgrounds, then grid, then bars.
	for i, p := range points {
		if p.Warmup {
			g := image.Rect(plot.Min.X+i*group, plot.Min.Y, plot.Min.X+(i+1)*group, plot.Max.Y)
			fill(img, g, faint)
			hatch(img, g, rule)
		}
	}
	yOf := func(v float64) int { return plot.Max.Y - int(math.Round(v/top*float64(plot.Dy()))) }
	for k := 0; float64(k)*step <= top+step/2; k++ {
		v := float64(k) * step
		y := yOf(v)
		c := rule
		if v == 0 {
			c = muted
		}
		fill(img, image.Rect(plot.Min.X, y, plot.Max.X, y+1), c)
		fill(img, image.Rect(plot.Min.X-5, y, plot.Min.X, y+1), muted)
		s := msLabel(v)
		text(img, reg, plot.Min.X-8-textWidth(reg, s), y+4, muted, s)
	}
	fill(img, image.Rect(plot.Min.X, plot.Min.Y, plot.Min.X+1, plot.Max.Y+1), muted)

	bar := max(1, min(26, (group-group/4)/2))
	every := max(1, (textWidth(reg, "000")+8+group-1)/group)
	for i, p := range points {
		gx := plot.Min.X + i*group + (group-2*bar)/2
		for j, b := range []struct {
			v float64
			c color.RGBA
		}{{p.ClientMS, client}, {p.TaskMS, task}} {
			r := image.Rect(gx+j*bar, yOf(b.v), gx+(j+1)*bar, plot.Max.Y)
			fill(img, r, b.c)
			if p.Warmup {
				hatch(img, r, paper)
			}
		}
		cx := plot.Min.X + i*group + group/2
		if i%every == 0 || p.Warmup && group >= textWidth(reg, "warmup") {
			s := fmt.Sprint(p.Index)
			text(img, reg, cx-textWidth(reg, s)/2, plot.Max.Y+16, ink, s)
		}
		if p.Warmup && group >= textWidth(reg, "warmup")+4 {
			text(img, reg, cx-textWidth(reg, "warmup")/2, plot.Max.Y+31, muted, "warmup")
		}
	}
	s := "request"
	text(img, reg, plot.Max.X-textWidth(reg, s), chartH-6, muted, s)
	return img, nil
}

// WritePNG encodes img as PNG at path, creating its directory.
func WritePNG(path string, img image.Image) error {
	if empty(img) {
		return fmt.Errorf("%s: no image", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	// The default level: 3 % larger than the best (a contact sheet, 165 against 160 kB) in a fifth
	// of its time (0.14 against 0.67 s), which every row of every run pays.
	enc := png.Encoder{CompressionLevel: png.DefaultCompression}
	if err := enc.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
