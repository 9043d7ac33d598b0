package reports

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"image"
	_ "image/gif"  // picture sizes
	_ "image/jpeg" // picture sizes
	_ "image/png"  // picture sizes
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// htmlPicture is a Picture ready for the page: its bytes inlined, or why they are missing.
type htmlPicture struct {
	Picture
	Src           template.URL // a data: URI
	Width, Height int
	Missing       string
}

type htmlRow struct {
	Row
	Bar      []barPart // the time parts as a stacked bar
	Anchor   string
	Label    string
	NotModel bool // reference/L0, L0-random or any profile other than full
	NotRun   bool // listed, but nothing ran (e.g. a GPU row without -tags gpu)
	Cells    []string
	Details  []detail
	Pictures []htmlPicture
}

type htmlPage struct {
	Generated        string
	Command          string
	Interrupted      string // InterruptedBanner, for an interrupted run
	Columns          []string
	Rows             []htmlRow
	InventoryColumns []string
	Inventory        []inventoryRow
}

// barPart is one segment of a case's stacked time bar.
type barPart struct {
	TimePart
	Pct    float64 // share of the bar's width
	Colour string
}

var barColours = []string{"#8c959f", "#54aeff", "#0969da", "#8250df", "#bf3989", "#fb8f44", "#d4a72c", "#1a7f37", "#cf222e", "#57606a"}

// timeBar lays out t's parts left to right, each as wide as its share of their sum.
func timeBar(t *Timing) []barPart {
	if t == nil {
		return nil
	}
	sum := 0.0
	for _, p := range t.Parts {
		sum += max(0, p.MS)
	}
	if sum <= 0 {
		return nil
	}
	bar := make([]barPart, len(t.Parts))
	for i, p := range t.Parts {
		bar[i] = barPart{TimePart: p, Pct: 100 * max(0, p.MS) / sum, Colour: barColours[i%len(barColours)]}
	}
	return bar
}

// pictureTypes are the formats a page inlines.
var pictureTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true}

// inline reads a picture under dir for the page. A picture that cannot be read is shown as
// missing, with the reason, rather than failing the whole report.
func inline(dir string, p Picture) htmlPicture {
	hp := htmlPicture{Picture: p}
	if !filepath.IsLocal(filepath.FromSlash(p.Path)) {
		hp.Missing = fmt.Sprintf("path %q is not inside the report directory", p.Path)
		return hp
	}
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p.Path)))
	if err != nil {
		hp.Missing = err.Error()
		return hp
	}
	mime := http.DetectContentType(b)
	if !pictureTypes[mime] {
		hp.Missing = fmt.Sprintf("%s is %s, not a PNG, JPEG or GIF image", p.Path, mime)
		return hp
	}
	if cfg, _, err := image.DecodeConfig(bytes.NewReader(b)); err == nil {
		hp.Width, hp.Height = cfg.Width, cfg.Height
	}
	// Safe as a URL: the media type is one of ours and the payload is base64.
	hp.Src = template.URL("data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(b))
	return hp
}

// notModel says whether a row's label disclaims being a model qualification.
func notModel(row Row) bool {
	return row.Profile != "full" || (row.Label != "" && row.Label != "model")
}

func outcomeClass(o string) string {
	switch o {
	case Passed:
		return "passed"
	case Failed:
		return "failed"
	case GapDetected:
		return "gap"
	}
	return "other"
}

// WriteHTML writes dir/index.html: one self-contained page (inline CSS, every picture
// inlined from dir/<Path> as a data: URI, nothing fetched from elsewhere) with the result
// table, each row's details, pictures and commands, and the inventory. It returns its path.
func WriteHTML(dir string, r Report) (string, error) {
	page := htmlPage{
		Columns:          summaryColumns,
		InventoryColumns: inventoryColumns,
		Inventory:        inventoryRows(r.Inventory),
	}
	page.Generated, page.Command = provenance(r)
	if r.Interrupted != "" {
		page.Interrupted = InterruptedBanner(r.Interrupted)
	}
	for i, row := range r.Rows {
		hr := htmlRow{Row: row, Bar: timeBar(row.Timing), Anchor: fmt.Sprintf("row-%d", i+1), Label: row.Label, NotModel: notModel(row), NotRun: row.Outcome == NotRun || row.Outcome == Excluded,
			Cells: summaryCells(row), Details: details(row)}
		if hr.Label == "" {
			hr.Label = Label(row.Profile)
		}
		for _, p := range row.Pictures {
			hr.Pictures = append(hr.Pictures, inline(dir, p))
		}
		page.Rows = append(page.Rows, hr)
	}
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, page); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "index.html")
	return path, os.WriteFile(path, b.Bytes(), 0o644)
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"outcomeClass": outcomeClass,
	"kindClass":    func(k string) string { return "pic-" + strings.Map(classRune, k) },
}).Parse(pageHTML))

func classRune(r rune) rune {
	if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
		return r
	}
	return '-'
}

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mediaqual results{{with .Generated}} {{.}}{{end}}</title>
<style>
:root { --ink: #1b1f24; --muted: #57606a; --rule: #d0d7de; --faint: #f6f8fa; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--ink); margin: 0; background: #fff; }
main { max-width: 1360px; margin: 0 auto; padding: 16px 20px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 20px 0 6px; padding-top: 8px; border-top: 2px solid var(--rule); }
h3 { font-size: 15px; margin: 16px 0 6px; }
.meta { color: var(--muted); margin: 0 0 12px; }
nav { margin: 8px 0 16px; }
nav a { margin-right: 12px; }
code { font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; background: var(--faint); border: 1px solid var(--rule); border-radius: 4px; padding: 1px 4px; white-space: pre-wrap; word-break: break-all; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 12px; font-size: 13px; }
th, td { border: 1px solid var(--rule); padding: 4px 6px; text-align: left; vertical-align: top; }
th { background: var(--faint); }
tr.variant td { color: var(--muted); background: #fbfbfc; }
.outcome { font-weight: 600; }
.outcome.passed { color: #1a7f37; } .outcome.failed { color: #cf222e; } .outcome.gap { color: #9a6700; } .outcome.other { color: var(--muted); }
.label { display: inline-block; font-weight: 700; font-size: 16px; padding: 5px 12px; border-radius: 6px; margin: 2px 0 4px; }
.label.notmodel { background: #fff8c5; border: 2px solid #d4a72c; color: #4d2d00; }
.label.model { background: #dafbe1; border: 2px solid #4ac26b; color: #0a3617; }
td.notmodel { background: #fff8c5; }
section.row p { margin: 4px 0; }
ul.details { margin: 4px 0; padding-left: 20px; }
ul.details li { margin: 2px 0; }
.stage-msg { white-space: pre-wrap; }
li.failed { color: #cf222e; }
figure { margin: 8px 0 12px; }
figcaption { font-weight: 600; margin-bottom: 4px; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--rule); display: block; }
.missing { color: #cf222e; font-weight: 600; }
.timebar { display: flex; height: 22px; border: 1px solid var(--rule); margin: 4px 0 2px; }
.timebar span { display: block; height: 100%; }
.timelegend span { margin-right: 12px; white-space: nowrap; font-size: 12.5px; }
.timelegend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
</style>
</head>
<body>
<main>
<header>
<h1>mediaqual results</h1>
{{if or .Generated .Command}}<p class="meta">Generated{{with .Generated}} {{.}}{{end}}{{with .Command}} by <code>{{.}}</code>{{end}}</p>{{end}}
{{if .Interrupted}}<p class="label notmodel"><strong>{{.Interrupted}}</strong></p>{{end}}
<nav>{{range .Rows}}<a href="#{{.Anchor}}">{{.Checkpoint}}</a>{{end}}<a href="#inventory">inventory</a></nav>
</header>

<section id="results">
<table class="results">
<thead><tr>{{range .Columns}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{- range .Rows}}
<tr>{{$row := .}}{{range $i, $c := .Cells}}
{{- if eq $i 0}}<td><a href="#{{$row.Anchor}}">{{$c}}</a></td>
{{- else if eq $i 1}}<td{{if $row.NotModel}} class="notmodel"{{end}}>{{$row.Label}}</td>
{{- else if eq $i 2}}<td class="outcome {{outcomeClass $row.Outcome}}">{{$c}}</td>
{{- else}}<td>{{$c}}</td>{{end}}{{end}}</tr>
{{- end}}
</tbody>
</table>
</section>

{{range .Rows}}
<section class="row" id="{{.Anchor}}">
<h2>{{.Checkpoint}}</h2>
{{if .NotModel}}<div class="label notmodel">Not a model qualification: {{.Label}}</div>
{{else if .NotRun}}<div class="label notmodel">Not run here: nothing about this checkpoint was measured in this report</div>
{{else}}<div class="label model">{{.Label}}: full profile on real weights</div>
{{end -}}
<p><span class="outcome {{outcomeClass .Outcome}}">{{.Outcome}}</span>{{if .Gap}}: {{.Gap}}{{end}}; inventory status: {{.Status}}</p>
<ul class="details">
{{- range .Details}}
<li{{if .Failed}} class="failed"{{end}}><strong>{{.Name}}</strong>: {{if .Code}}{{if .Text}}<code>{{.Text}}</code>{{else}}—{{end}}{{else if .Stage}}<span class="stage-msg">{{.Text}}</span>{{else}}{{.Text}}{{end}}</li>
{{- end}}
</ul>
{{- if .Bar}}
<figure class="timing">
<figcaption>Where a request's time went (p50 of each part over the measured requests, ms)</figcaption>
<div class="timebar">{{range .Bar}}<span style="width: {{printf "%.3f" .Pct}}%; background: {{.Colour}}" title="{{.Name}} {{printf "%.1f" .MS}} ms"></span>{{end}}</div>
<div class="timelegend">{{range .Bar}}<span><i style="background: {{.Colour}}"></i>{{.Name}} {{printf "%.1f" .MS}}</span>{{end}}</div>
</figure>
{{- end}}
{{- range .Pictures}}
<figure class="pic {{kindClass .Kind}}">
<figcaption>{{.Title}}</figcaption>
{{if .Missing}}<p class="missing">picture missing: {{.Path}} ({{.Missing}})</p>
{{else}}<img decoding="sync" src="{{.Src}}" alt="{{.Title}}" title="{{.Title}}" data-kind="{{.Kind}}" data-path="{{.Path}}"{{if .Width}} width="{{.Width}}" height="{{.Height}}"{{end}}>
{{end -}}
</figure>
{{- end}}
</section>
{{end}}

<section id="inventory">
<h2>Inventory</h2>
<p class="meta">Every inventory row, whatever its state; variants are recorded under their checkpoint and never counted as models of their own.</p>
<table class="inventory">
<thead><tr>{{range .InventoryColumns}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{- range .Inventory}}
<tr{{if .Variant}} class="variant"{{end}}>{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{- end}}
</tbody>
</table>
</section>
</main>
</body>
</html>
`
