package reports

import (
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// uniqueColour is frame i's colour: distinct for every i below 64.
func uniqueColour(i int) color.RGBA {
	return color.RGBA{uint8(20 + (i*53)%200), uint8(30 + (i*97)%190), uint8(40 + (i*29)%180), 0xff}
}

func uniformFrames(n, w, h int) []*image.RGBA {
	frames := make([]*image.RGBA, n)
	for i := range frames {
		frames[i] = image.NewRGBA(image.Rect(0, 0, w, h))
		fill(frames[i], frames[i].Bounds(), uniqueColour(i))
	}
	return frames
}

func near(a, b color.RGBA, tol int) bool {
	return abs(int(a.R)-int(b.R)) <= tol && abs(int(a.G)-int(b.G)) <= tol && abs(int(a.B)-int(b.B)) <= tol
}

// dark counts pixels in r darker than mid grey: drawn text.
func dark(img *image.RGBA, r image.Rectangle) int {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c := img.RGBAAt(x, y)
			if int(c.R)+int(c.G)+int(c.B) < 3*110 {
				n++
			}
		}
	}
	return n
}

func TestPickFramesAlwaysHasFirstMiddleLast(t *testing.T) {
	for _, tc := range []struct{ total, n, want int }{
		{17, 5, 5}, {17, 4, 4}, {81, 9, 9}, {100, 2, 3}, {10, 4, 4}, {4, 9, 4}, {2, 5, 2}, {1, 3, 1}, {3, 3, 3},
	} {
		got := pickFrames(tc.total, tc.n)
		assert.Len(t, got, tc.want, "%d of %d", tc.n, tc.total)
		assert.Contains(t, got, 0)
		assert.Contains(t, got, (tc.total-1)/2)
		assert.Contains(t, got, tc.total-1)
		assert.IsIncreasing(t, got, "%d of %d: sorted, no duplicates", tc.n, tc.total)
	}
	assert.Equal(t, []int{0, 4, 8, 12, 16}, pickFrames(17, 5), "evenly spaced")
}

func TestContactSheetShowsEachPickedFrameAtItsTile(t *testing.T) {
	frames := uniformFrames(17, 320, 192)
	sheet, err := ContactSheet(frames, 5)
	require.NoError(t, err)
	picked := pickFrames(17, 5)
	l := layoutSheet(320, 192, len(picked))
	require.Equal(t, image.Rect(0, 0, l.width, l.height), sheet.Bounds())
	assert.LessOrEqual(t, sheet.Bounds().Dx(), MaxPictureWidth)
	assert.Equal(t, 5, l.cols, "5 tiles in one row")
	for k, fi := range picked {
		tile := l.tile(k)
		for _, p := range []image.Point{tile.Min.Add(image.Pt(2, 2)), tile.Max.Sub(image.Pt(3, 3)),
			tile.Min.Add(tile.Max).Div(2)} {
			assert.Equal(t, uniqueColour(fi), sheet.RGBAAt(p.X, p.Y), "tile %d shows frame %d at %v", k, fi, p)
		}
		label := image.Rect(tile.Min.X, tile.Max.Y, tile.Max.X, tile.Max.Y+sheetLabel)
		assert.Greater(t, dark(sheet, label), 30, "tile %d is labelled", k)
	}
	assert.Greater(t, dark(sheet, image.Rect(0, 0, l.width, sheetHeader)), 100, "the sheet has a title")
}

func TestContactSheetFitsLargeFramesAndShortClips(t *testing.T) {
	sheet, err := ContactSheet(uniformFrames(30, 1920, 1080), 9)
	require.NoError(t, err)
	assert.LessOrEqual(t, sheet.Bounds().Dx(), MaxPictureWidth)
	l := layoutSheet(1920, 1080, 9)
	assert.Equal(t, 240, l.thumbW)
	assert.Equal(t, 135, l.thumbH)
	assert.Equal(t, 5, l.cols, "9 tiles balanced as 5+4")
	assert.Equal(t, uniqueColour(14), sheet.RGBAAt(l.tile(4).Min.X+160, l.tile(4).Min.Y+90), "the middle frame, 14 of 0..29, is the fifth tile")

	// A clip shorter than n shows each frame once.
	frames := uniformFrames(2, 64, 64)
	sheet, err = ContactSheet(frames, 5)
	require.NoError(t, err)
	l = layoutSheet(64, 64, 2)
	for k := range 2 {
		c := l.tile(k).Min.Add(image.Pt(32, 32))
		assert.Equal(t, uniqueColour(k), sheet.RGBAAt(c.X, c.Y))
	}
	assert.Equal(t, 2, l.cols*l.rows, "no third tile")
}

func TestContactSheetRejectsEmptyInput(t *testing.T) {
	_, err := ContactSheet(nil, 5)
	assert.ErrorContains(t, err, "no frames")
	_, err = ContactSheet([]*image.RGBA{image.NewRGBA(image.Rect(0, 0, 8, 8)), nil}, 5)
	assert.ErrorContains(t, err, "frame 1 is empty")
	_, err = ContactSheet([]*image.RGBA{image.NewRGBA(image.Rectangle{})}, 5)
	assert.ErrorContains(t, err, "frame 0 is empty")
	_, err = ContactSheet(uniformFrames(3, 8, 8), 0)
	assert.Error(t, err)
}

// centreX is the mean x of the pixels of img near c, or -1 when there are fewer than min.
func centreX(img *image.RGBA, c color.RGBA, min int) float64 {
	sum, n := 0, 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if near(img.RGBAAt(x, y), c, 2) {
				sum += x
				n++
			}
		}
	}
	if n < min {
		return -1
	}
	return float64(sum) / float64(n)
}

func TestEditStripShowsBeforeAfterAndAmplifiedDifference(t *testing.T) {
	before := image.NewRGBA(image.Rect(0, 0, 200, 100))
	fill(before, before.Bounds(), color.RGBA{200, 40, 40, 255})
	after := image.NewRGBA(image.Rect(0, 0, 100, 50)) // an edit may change the size
	fill(after, after.Bounds(), color.RGBA{180, 60, 40, 255})
	strip, err := EditStrip(before, after)
	require.NoError(t, err)
	assert.LessOrEqual(t, strip.Bounds().Dx(), MaxPictureWidth)

	xb := centreX(strip, color.RGBA{200, 40, 40, 255}, 5000)
	xa := centreX(strip, color.RGBA{180, 60, 40, 255}, 5000)
	xd := centreX(strip, color.RGBA{20 * DiffGain, 20 * DiffGain, 0, 255}, 5000)
	require.True(t, xb > 0 && xa > 0 && xd > 0, "all three panels are drawn: %v %v %v", xb, xa, xd)
	assert.True(t, xb < xa && xa < xd, "before | after | difference, left to right")

	// Same height: each panel's column through its centre has the same run of its colour.
	run := func(x float64, c color.RGBA) int {
		n := 0
		for y := range strip.Bounds().Dy() {
			if near(strip.RGBAAt(int(x), y), c, 2) {
				n++
			}
		}
		return n
	}
	h := run(xb, color.RGBA{200, 40, 40, 255})
	assert.Equal(t, 100, h)
	assert.Equal(t, h, run(xa, color.RGBA{180, 60, 40, 255}))
	assert.Equal(t, h, run(xd, color.RGBA{80, 80, 0, 255}))
	assert.Greater(t, dark(strip, image.Rect(0, 0, strip.Bounds().Dx(), 40)), 300, "captions")
}

func TestEditStripRejectsEmptyInput(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	_, err := EditStrip(nil, img)
	assert.ErrorContains(t, err, "no before image")
	_, err = EditStrip(img, image.NewRGBA(image.Rectangle{}))
	assert.ErrorContains(t, err, "no after image")
}

func TestLatencyChartMarksWarmup(t *testing.T) {
	points := []LatencyPoint{{Index: 0, ClientMS: 900, TaskMS: 600, Warmup: true},
		{Index: 1, ClientMS: 310, TaskMS: 70}, {Index: 2, ClientMS: 295, TaskMS: 72}, {Index: 3, ClientMS: 305, TaskMS: 69}}
	img, err := LatencyChart(points)
	require.NoError(t, err)
	assert.Equal(t, chartMinW, img.Bounds().Dx())
	xc, xt := centreX(img, client, 200), centreX(img, task, 20)
	assert.Greater(t, xc, 0.0, "client bars")
	assert.Greater(t, xt, 0.0, "Task bars")

	// The warmup group's background is hatched; a measured group's is not.
	_, group := chartGeometry(len(points))
	hatched := func(i int) bool {
		x := chartLeft + i*group + 2
		stripes := 0
		for y := chartUpper + 5; y < chartUpper+40; y++ {
			if img.RGBAAt(x, y) == rule {
				stripes++
			}
		}
		return stripes > 5
	}
	assert.True(t, hatched(0), "warmup hatched")
	assert.False(t, hatched(1), "measured request plain")

	_, err = LatencyChart(nil)
	assert.ErrorContains(t, err, "no points")
	_, err = LatencyChart([]LatencyPoint{{Index: 4, ClientMS: math.NaN()}})
	assert.ErrorContains(t, err, "request 4")
	many := make([]LatencyPoint, 500)
	for i := range many {
		many[i] = LatencyPoint{Index: i, ClientMS: float64(i), TaskMS: float64(i) / 2, Warmup: i < 3}
	}
	img, err = LatencyChart(many)
	require.NoError(t, err)
	assert.LessOrEqual(t, img.Bounds().Dx(), MaxPictureWidth)
	w, group := chartGeometry(2000)
	assert.Equal(t, 2, group)
	assert.Equal(t, chartLeft+chartRight+4000, w, "every request keeps its bars")
}

func TestNiceSteps(t *testing.T) {
	assert.Equal(t, 200.0, niceStep(900, 5))
	assert.Equal(t, 2000.0, niceStep(8650, 5))
	assert.Equal(t, 0.2, niceStep(1, 5))
	assert.Equal(t, "8 s", msLabel(8000))
	assert.Equal(t, "200 ms", msLabel(200))
	assert.Equal(t, "1.5 s", msLabel(1500))
	assert.Equal(t, "0.3 ms", msLabel(3*0.1))
}

func TestWritePNG(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cases", "ref-t2v", "sheet.png")
	img := uniformFrames(1, 10, 6)[0]
	require.NoError(t, WritePNG(p, img))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	back, err := png.Decode(f)
	require.NoError(t, err)
	assert.Equal(t, img.Bounds(), back.Bounds())
	assert.Error(t, WritePNG(filepath.Join(t.TempDir(), "x.png"), nil))
}
