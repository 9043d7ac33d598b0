package reports

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/spec"
)

// hue is a saturated colour, h in [0, 1).
func hue(h float64) color.RGBA {
	f := func(n float64) uint8 {
		k := math.Mod(n+h*6, 6)
		return uint8(math.Round(255 * (1 - math.Max(0, math.Min(1, math.Min(k, 4-k))))))
	}
	return color.RGBA{f(5), f(3), f(1), 0xff}
}

// ballColour is the colour of the ball in frame i of n: unique per frame.
func ballColour(i, n int) color.RGBA { return hue(0.8 * float64(i) / float64(n)) }

// ballFrames is a clip of a ball crossing a sky, its colour changing with each frame.
func ballFrames(n, w, h int) []*image.RGBA {
	frames := make([]*image.RGBA, n)
	for i := range frames {
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := range h {
			c := color.RGBA{uint8(120 + 100*y/h), uint8(170 + 60*y/h), 240, 255}
			if y > h*3/4 {
				c = color.RGBA{90, 140, 70, 255}
			}
			fill(img, image.Rect(0, y, w, y+1), c)
		}
		r := float64(h) / 5
		cx := r + (float64(w)-2*r)*float64(i)/float64(max(1, n-1))
		cy := float64(h)*3/4 - r - math.Abs(math.Sin(float64(i)*math.Pi/6))*float64(h)/3
		for y := range h {
			for x := range w {
				if math.Hypot(float64(x)-cx, float64(y)-cy) <= r {
					img.SetRGBA(x, y, ballColour(i, n))
				}
			}
		}
		frames[i] = img
	}
	return frames
}

// sepia is a stand-in edit: sepia tone.
func sepia(src image.Image) *image.RGBA {
	b := src.Bounds()
	out := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	for y := 0; y < b.Dy(); y++ {
		for x := 0; x < b.Dx(); x++ {
			r, g, bl, _ := src.At(b.Min.X+x, b.Min.Y+y).RGBA()
			fr, fg, fb := float64(r>>8), float64(g>>8), float64(bl>>8)
			c := func(v float64) uint8 { return uint8(math.Min(255, v)) }
			out.SetRGBA(x, y, color.RGBA{c(.393*fr + .769*fg + .189*fb), c(.349*fr + .686*fg + .168*fb), c(.272*fr + .534*fg + .131*fb), 255})
		}
	}
	return out
}

const (
	sheetTitle   = "Contact sheet: ref-t2v, prompt 1 “a red ball bounces” (17 frames)"
	stripTitle   = "Before / after: ref-edit, chelsea.png “sepia”"
	latencyTitle = "Latency per request: ref-t2v (1 warmup, 4 measured)"
)

// demoReport writes a report's pictures under dir and returns the report naming them.
func demoReport(t *testing.T, dir string) Report {
	t.Helper()
	sheet, err := ContactSheet(ballFrames(17, 320, 192), 5)
	require.NoError(t, err)
	require.NoError(t, WritePNG(filepath.Join(dir, "cases/ref-t2v/contact-sheet-1.png"), sheet))

	f, err := os.Open("../fixtures/images/chelsea.png")
	require.NoError(t, err)
	before, err := png.Decode(f)
	f.Close()
	require.NoError(t, err)
	strip, err := EditStrip(before, sepia(before))
	require.NoError(t, err)
	require.NoError(t, WritePNG(filepath.Join(dir, "cases/ref-edit/edit-strip-1.png"), strip))

	chart, err := LatencyChart([]LatencyPoint{{0, 412, 96, true}, {1, 305, 71, false}, {2, 298, 69, false},
		{3, 311, 74, false}, {4, 302, 70, false}})
	require.NoError(t, err)
	require.NoError(t, WritePNG(filepath.Join(dir, "cases/ref-t2v/latency.png"), chart))

	started := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	t2v := spec.Settings{Size: spec.Size{W: 320, H: 192}, NumFrames: 17, FPS: 16, Steps: 4, Guidance: 5, Seed: 42}
	edit := spec.Settings{Size: spec.Size{W: 512, H: 512}, Steps: 1, Guidance: 1, Seed: 42}
	wan := spec.Settings{Size: spec.Size{W: 832, H: 480}, NumFrames: 81, FPS: 16, Steps: 50, Guidance: 5, Seed: 42}
	return Report{
		Generated: started.Add(3 * time.Minute), Command: "go test -count=1 -timeout 30m .",
		Rows: []Row{
			{Checkpoint: "ref-t2v", Family: "reference", Workload: spec.TextToVideo, Profile: "reference/L0",
				Label: Label("reference/L0"), Precision: "uint8", Status: spec.Implemented, Outcome: Passed, Settings: &t2v,
				Stages: []Stage{{Name: "inventory", Passed: true}, {Name: "correctness", Passed: true, Message: "4 native outputs match their goldens"},
					{Name: "artifacts", Passed: true, Message: "5 artifacts fetched and verified"}, {Name: "identity", Passed: true},
					{Name: "timing", Passed: true}, {Name: "cleanup", Passed: true}},
				Timing: &Timing{Requests: 4, ClientP50MS: 303.5, ClientP95MS: 310.1, ClientMaxMS: 311, TaskP50MS: 70.5,
					TaskP95MS: 73.4, OverheadP50MS: 233, PollIntervalMS: 100, ItemsPerSecond: 3.3, FramesPerSecond: 56, PeakMemoryMB: 41, Source: "AIPerf"},
				AIPerfCommand: "aiperf profile --model ref-t2v --endpoint-type video_generation --request-count 4",
				Command:       "go test -count=1 -run '^TestRef_t2v$' .", Started: started, Duration: "41s",
				Pictures: []Picture{{Kind: ContactSheetKind, Title: sheetTitle, Path: "cases/ref-t2v/contact-sheet-1.png"},
					{Kind: LatencyKind, Title: latencyTitle, Path: "cases/ref-t2v/latency.png"}}},
			{Checkpoint: "ref-edit", Family: "reference", Workload: spec.ImageEdit, Profile: "reference/L0",
				Label: Label("reference/L0"), Precision: "uint8", Status: spec.Implemented, Outcome: Passed, Settings: &edit,
				Stages: []Stage{{Name: "inventory", Passed: true}, {Name: "artifacts", Passed: true, Message: "4 edits fetched and verified"},
					{Name: "influence", Passed: true, Message: "a different reference changes the output"}},
				Command: "go test -count=1 -run '^TestRef_edit$' .", Started: started, Duration: "12s",
				Pictures: []Picture{{Kind: EditStripKind, Title: stripTitle, Path: "cases/ref-edit/edit-strip-1.png"}}},
			{Checkpoint: "Wan-AI/Wan2.1-T2V-1.3B", Family: "wan", Workload: spec.TextToVideo, Profile: "L0-random",
				Label: Label("L0-random"), Precision: "bf16", Status: spec.Planned, Outcome: NotRun,
				Note: "needs -tags gpu and a GPU host", Command: "go test -tags gpu -count=1 -run '^TestWan2_1_T2V_1_3B$' ."},
		},
		Inventory: []spec.Entry{
			{Checkpoint: spec.Checkpoint{ID: "ref-t2v", Family: "reference", Profile: "reference/L0", Precision: "uint8", Defaults: t2v},
				Workload: spec.TextToVideo, Status: spec.Implemented},
			{Checkpoint: spec.Checkpoint{ID: "ref-edit", Family: "reference", Profile: "reference/L0", Precision: "uint8", Defaults: edit},
				Workload: spec.ImageEdit, Status: spec.Implemented},
			{Checkpoint: spec.Checkpoint{ID: "Wan-AI/Wan2.1-T2V-1.3B", Family: "wan", Profile: "L0-random", Precision: "bf16", Defaults: wan},
				Workload: spec.TextToVideo, Status: spec.Planned, Note: "native adapter runs; revision unpinned",
				Variants: []spec.Variant{{Name: "fp8", Note: "quantised transformer", Status: spec.Planned}}},
			{Checkpoint: spec.Checkpoint{ID: "nvidia/Cosmos3-Nano", Family: "cosmos"}, Workload: spec.TextToVideo,
				Status: spec.Excluded, Note: "excluded: partial/L0 profile only"},
		},
	}
}

func TestWriteHTMLIsOneSelfContainedEscapedPage(t *testing.T) {
	dir := t.TempDir()
	r := demoReport(t, dir)
	r.Rows = append(r.Rows, Row{Checkpoint: `evil/<script>alert(1)</script>`, Profile: "full", Label: "model", Outcome: Failed,
		Command:  `go test -run 'x' . && echo "<b>"`,
		Pictures: []Picture{{Kind: LatencyKind, Title: "gone", Path: "cases/evil/missing.png"}, {Kind: LatencyKind, Title: "outside", Path: "../../etc/passwd"}}})
	path, err := WriteHTML(dir, r)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "index.html"), path)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	page := string(b)

	assert.Equal(t, 3, strings.Count(page, `src="data:image/png;base64,`), "three pictures inlined")
	assert.NotRegexp(t, `(?i)(src|href)="(https?:)?//`, page, "nothing fetched from elsewhere")
	assert.NotContains(t, page, "<link")
	assert.NotContains(t, page, "<script>", "checkpoint names are escaped")
	assert.Contains(t, page, "evil/&lt;script&gt;alert(1)&lt;/script&gt;")
	assert.Contains(t, page, "<code>go test -run &#39;x&#39; . &amp;&amp; echo &#34;&lt;b&gt;&#34;</code>")
	assert.Contains(t, page, "<code>aiperf profile --model ref-t2v --endpoint-type video_generation --request-count 4</code>")
	assert.Equal(t, 2, strings.Count(page, "Not a model qualification: reference/L0 machinery check, not a model qualification"),
		"every reference row says so")
	assert.Contains(t, page, `class="label notmodel">Not a model qualification: L0-random weights: mechanics and timing only, not quality`)
	assert.Contains(t, page, `class="label model">model: full profile on real weights`)
	assert.Contains(t, page, "picture missing: cases/evil/missing.png")
	assert.Contains(t, page, "picture missing: ../../etc/passwd (path &#34;../../etc/passwd&#34; is not inside the report directory)")
	assert.Contains(t, page, "<figcaption>"+sheetTitle+"</figcaption>")
	for _, col := range append(summaryColumns, inventoryColumns...) {
		assert.Contains(t, page, "<th>"+col+"</th>")
	}
	assert.Contains(t, page, `<tr class="variant"><td>↳ variant fp8 of Wan-AI/Wan2.1-T2V-1.3B</td>`)
	assert.Contains(t, page, "<td>nvidia/Cosmos3-Nano</td>", "excluded inventory rows too")
}

func TestNotModelCoversEveryLabelButModel(t *testing.T) {
	assert.True(t, notModel(Row{Profile: "reference/L0", Label: Label("reference/L0")}))
	assert.True(t, notModel(Row{Profile: "L0-random", Label: Label("L0-random")}))
	assert.True(t, notModel(Row{Profile: "partial"}))
	assert.False(t, notModel(Row{Profile: "full", Label: "model"}))
}

// chromium is the browser the page test drives; the Makefile's setup installs Debian's.
func chromium(t *testing.T) string {
	bin := os.Getenv("MEDIAQUAL_CHROMIUM")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("headless Chromium is needed to check the HTML report and %s is missing (%v): "+
			"the Makefile's setup installs it (Debian: apt-get install chromium), or set MEDIAQUAL_CHROMIUM", bin, err)
	}
	return bin
}

func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--hide-scrollbars", "--force-device-scale-factor=1", "--user-data-dir=" + t.TempDir()}, args...)
	cmd := exec.CommandContext(ctx, bin, args...)
	home := t.TempDir() // Chromium writes its NSS database and caches under HOME
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_CACHE_HOME="+home)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "chromium %s\n%s", strings.Join(args, " "), stderr.String())
	return stdout.Bytes()
}

var imgTag = regexp.MustCompile(`<img [^>]*>`)

func attr(tag, name string) string {
	m := regexp.MustCompile(` ` + name + `="([^"]*)"`).FindStringSubmatch(tag)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestHTMLReportInChromium renders a report with every kind of picture in headless Chromium
// and checks what the page shows: the DOM Chromium built, and a screenshot (kept in
// MEDIAQUAL_SCREENSHOT_DIR when set).
func TestHTMLReportInChromium(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	paths, err := WriteFiles(dir, demoReport(t, dir))
	require.NoError(t, err)
	page := paths[2]
	require.Equal(t, "index.html", filepath.Base(page))
	url := "file://" + page

	dom := string(runChromium(t, bin, "--dump-dom", url))
	require.Contains(t, dom, `<table class="inventory">`)
	inventory := dom[strings.Index(dom, `<table class="inventory">`):]
	for _, id := range []string{"nvidia/Cosmos3-Nano", "ref-t2v", "Wan-AI/Wan2.1-T2V-1.3B", "↳ variant fp8 of Wan-AI/Wan2.1-T2V-1.3B"} {
		assert.Contains(t, inventory, "<td>"+id+"</td>")
	}
	imgs := map[string]string{} // kind -> tag
	for _, tag := range imgTag.FindAllString(dom, -1) {
		imgs[attr(tag, "data-kind")] = tag
	}
	for kind, title := range map[string]string{ContactSheetKind: sheetTitle, EditStripKind: stripTitle, LatencyKind: latencyTitle} {
		tag, ok := imgs[kind]
		if !assert.True(t, ok, "a %s <img>", kind) {
			continue
		}
		assert.True(t, strings.HasPrefix(attr(tag, "src"), "data:image/png;base64,"), "%s inlined as a data: URI", kind)
		assert.Equal(t, title, attr(tag, "title"))
		assert.Contains(t, dom, "<figcaption>"+title+"</figcaption>")
	}
	assert.Contains(t, dom, "Not a model qualification: reference/L0 machinery check")
	assert.Contains(t, dom, "Not a model qualification: L0-random weights")

	shot := filepath.Join(t.TempDir(), "report.png")
	runChromium(t, bin, "--screenshot="+shot, "--window-size=1400,2400", url)
	if d := os.Getenv("MEDIAQUAL_SCREENSHOT_DIR"); d != "" {
		b, err := os.ReadFile(shot)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "report-screenshot.png"), b, 0o644))
	}
	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	assert.Equal(t, image.Rect(0, 0, 1400, 2400), img.Bounds())
	// The contact sheet is on screen: the first, middle and last frames' ball colours are.
	for _, i := range []int{0, 8, 16} {
		assert.Greater(t, countNear(img, ballColour(i, 17), 3), 500, "frame %d's ball is on screen", i)
	}
	assert.Greater(t, countNear(img, client, 3), 500, "latency bars are on screen")
}

func countNear(img image.Image, c color.RGBA, tol int) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), 255}, c, tol) {
				n++
			}
		}
	}
	return n
}

func TestNotRunRowsClaimNothing(t *testing.T) {
	dir := t.TempDir()
	r := Report{Rows: []Row{{Checkpoint: "Wan-AI/Wan2.1-T2V-1.3B", Profile: "full", Label: Label("full"), Outcome: NotRun}}}
	path, err := WriteHTML(dir, r)
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "full profile on real weights")
	assert.Contains(t, string(b), "Not run here")
}

// TestTimeBarShowsEveryPart: each part is a segment as wide as its share, and a case without
// parts gets no bar.
func TestTimeBarShowsEveryPart(t *testing.T) {
	dir := t.TempDir()
	r := demoReport(t, dir)
	r.Rows[0].Timing = &Timing{Requests: 4, Parts: []TimePart{{"queue", 1}, {"denoise", 6}, {"encode", 3}}}
	path, err := WriteHTML(dir, r)
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	page := string(b)
	assert.Equal(t, 1, strings.Count(page, `<div class="timebar">`))
	assert.Contains(t, page, `<span style="width: 60.000%; background: #54aeff" title="denoise 6.0 ms"></span>`)
	assert.Contains(t, page, `title="encode 3.0 ms"`)
	assert.NotContains(t, page, "ZgotmplZ", "template escaping kept every style value")
	assert.Nil(t, timeBar(&Timing{Parts: []TimePart{{"queue", 0}}}), "nothing to show")
}
