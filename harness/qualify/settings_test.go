package qualify

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/aiperf"
	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/check/checktest"
	"github.com/mediaqual/mediaqual/models/spec"
)

// Every native record is held to what its input asked (check actual-settings), with the diff.
// correctness calls nativeActual on the records `mediaserve task` wrote; before it, nothing
// read a native record's actual.
func TestNativeRecordsAreHeldToTheirSettings(t *testing.T) {
	e := lookup(t, "ref-t2v")
	row := NewRow(e)
	c := &caseRun{T: t, Entry: e, Config: Defaults(), Row: &row}
	items, err := c.items()
	require.NoError(t, err)
	honest := func(a api.Settings) api.Actual {
		sz, err := spec.ParseSize(a.Size)
		require.NoError(t, err)
		return api.Actual{NumFrames: a.NumFrames, Width: sz.W, Height: sz.H, FPS: a.FPS, Steps: a.Steps, Guidance: a.Guidance, Seed: a.Seed}
	}
	native := nativeOutputs{}
	for _, it := range items {
		native[it.key] = nativeOutput{Actual: honest(it.asked)}
	}
	assert.Empty(t, nativeActual(items, native))

	n := native[items[1].key]
	n.Actual.Steps = 1
	native[items[1].key] = n
	errs := nativeActual(items, native)
	require.Len(t, errs, 1)
	var f *check.Failure
	require.ErrorAs(t, errs[0], &f)
	checktest.Failed(t, errs[0], "actual-settings")
	assert.Contains(t, errs[0].Error(), "native "+items[1].key+": check actual-settings")
	// go-cmp's diff (its spacing is deliberately unstable): asked 4 steps, the record says 1.
	assert.Regexp(t, `\n-[^\n]*Steps:[^\n]*4,\n\+[^\n]*Steps:[^\n]*1,\n`, errs[0].Error())
}

// An edit AIPerf received, as its raw record keeps it: one PNG, and actual when given.
func editRecord(t *testing.T, w, h int, actual *api.Actual) aiperf.RawRecord {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	img.Set(0, 0, color.RGBA{1, 2, 3, 255})
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, img))
	body := map[string]any{"id": "edit_1", "data": []any{map[string]any{"b64_json": base64.StdEncoding.EncodeToString(buf.Bytes())}}}
	if actual != nil {
		body["actual"] = actual
	}
	b, err := json.Marshal(body)
	require.NoError(t, err)
	return aiperf.RawRecord{Responses: []aiperf.RawResponse{{Text: string(b)}}}
}

// Every served artifact is held to what was asked; an endpoint that reports no actual is "not
// reported": it passes no check, and the row is capped like any other unchecked item. Shown
// failing with the served check removed from FetchArtifacts (every doctored actual passed).
func TestServedActualSettings(t *testing.T) {
	e := lookup(t, "ref-edit")
	fetch := func(external bool, actual *api.Actual) (*caseRun, string, error) {
		row := NewRow(e)
		row.Counts = map[string]int{}
		cfg := Defaults()
		if external {
			cfg.Target.Endpoint = "http://endpoint.invalid"
		}
		c := &caseRun{T: t, Entry: e, Config: cfg, Row: &row, Dir: t.TempDir()}
		items, err := c.items()
		require.NoError(t, err)
		it := items[0]
		r := aiperfRequest{item: it, RequestID: "r1", JobID: "edit_1", raw: editRecord(t, e.Defaults.Size.W, e.Defaults.Size.H, actual), actual: actual}
		if !external {
			png, err := check.EditResponse(r.raw)
			require.NoError(t, err)
			r.declared.SHA256 = digest(png)
		}
		_, msg, err := c.fetchArtifacts(&serving{External: external}, nil, aiperfRun{Requests: []aiperfRequest{r}})
		return c, msg, err
	}
	d := e.Defaults
	honest := &api.Actual{Width: d.Size.W, Height: d.Size.H, Steps: d.Steps, Guidance: d.Guidance, Seed: d.Seed, Precision: "fp32"}

	_, msg, err := fetch(false, honest)
	require.NoError(t, err)
	assert.Contains(t, msg, "each one's actual settings equal to what was asked")

	unasked := *honest
	unasked.NumFrames, unasked.FPS = 1, 24
	other := *honest
	other.Guidance = 7
	for _, a := range []*api.Actual{&unasked, &other} {
		for _, external := range []bool{false, true} {
			_, _, err = fetch(external, a)
			var f *check.Failure
			require.ErrorAs(t, err, &f, "external %v, actual %+v", external, a)
			checktest.Failed(t, err, "actual-settings")
			assert.Contains(t, err.Error(), "(-asked +actual)")
		}
	}

	_, _, err = fetch(false, nil)
	assert.ErrorContains(t, err, "check actual-settings: the ledger's line reports no actual", "mediaserve must report it")

	c, msg, err := fetch(true, nil)
	require.NoError(t, err, "an endpoint without actual is not failed for it")
	assert.Contains(t, msg, "actual settings not reported for 1 of them")
	require.Len(t, c.Row.Limits, 1, "but the row is capped")
	assert.Equal(t, spec.Implemented, c.Row.Limits[0].Ceiling)
	assert.Contains(t, c.Row.Limits[0].Why, "actual-settings not reported")
}

// The reference families' bundle is the mediaserve binary: one that cannot be read is an
// error, not the digest of nothing. Shown failing before: the row recorded sha256
// e3b0c44298fc1c14 (the empty input's) and the stage failed on something else.
func TestUnreadableMediaserveIsAnError(t *testing.T) {
	e := lookup(t, "ref-t2v")
	row := NewRow(e)
	cfg := Defaults()
	cfg.Mediaserve = t.TempDir() + "/no-such-mediaserve"
	c := &caseRun{T: t, Entry: e, Config: cfg, Row: &row, Dir: t.TempDir(), ctx: t.Context()}
	_, _, err := c.correctness(bundleFacts{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the mediaserve binary, which is this row's bundle")
	assert.Empty(t, row.Bundle, "no digest recorded")
}
