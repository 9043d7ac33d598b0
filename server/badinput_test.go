package server_test

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"mime/multipart"
	"net/textproto"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/server"
)

// payload is a request body and its Content-Type.
type payload struct {
	ct   string
	body []byte
}

// mpPart is one multipart part; a filename makes it a file part (image/png, as SDKs send it).
type mpPart struct {
	name, filename string
	data           []byte
}

// mp builds a multipart body with the parts in the order given (duplicates included).
func mp(parts ...mpPart) payload {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		cd := fmt.Sprintf(`form-data; name="%s"`, p.name)
		if p.filename != "" {
			cd += fmt.Sprintf(`; filename="%s"`, p.filename)
			h.Set("Content-Type", "image/png")
		}
		h.Set("Content-Disposition", cd)
		w, err := mw.CreatePart(h)
		if err != nil {
			panic(err)
		}
		_, _ = w.Write(p.data)
	}
	if err := mw.Close(); err != nil {
		panic(err)
	}
	return payload{mw.FormDataContentType(), buf.Bytes()}
}

// fieldsWith is base with kv applied in order: a value replaces the field in place or appends
// it, "<absent>" removes it.
func fieldsWith(base []string, kv ...string) []mpPart {
	var parts []mpPart
	for i := 0; i+1 < len(base); i += 2 {
		parts = append(parts, mpPart{name: base[i], data: []byte(base[i+1])})
	}
	for i := 0; i+1 < len(kv); i += 2 {
		k, v := kv[i], kv[i+1]
		at := -1
		for j, p := range parts {
			if p.name == k {
				at = j
			}
		}
		switch {
		case v == "<absent>" && at >= 0:
			parts = append(parts[:at], parts[at+1:]...)
		case at >= 0:
			parts[at].data = []byte(v)
		case v != "<absent>":
			parts = append(parts, mpPart{name: k, data: []byte(v)})
		}
	}
	return parts
}

// vid is the AIPerf form for ref-t2v (every value a text field) with kv applied.
func vid(kv ...string) payload {
	return mp(fieldsWith([]string{"model", "ref-t2v", "prompt", "a cat"}, kv...)...)
}

// edit is an image-edit form for ref-edit with files and kv applied.
func edit(files []mpPart, kv ...string) payload {
	return mp(append(fieldsWith([]string{"model", "ref-edit", "prompt", "invert the colours"}, kv...), files...)...)
}

func rawBody(ct, body string) payload { return payload{ct, []byte(body)} }
func jsonBody(body string) payload    { return payload{"application/json", []byte(body)} }

// pngHeader is a PNG signature and an IHDR chunk (with a valid CRC) claiming w x h 8-bit RGBA.
// With data it goes on with an IDAT holding a small valid zlib stream and IEND: enough for a
// decoder that trusted the header to allocate the whole w*h*4-byte image before failing.
func pngHeader(w, h uint32, data bool) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, payload []byte) {
		_ = binary.Write(&b, binary.BigEndian, uint32(len(payload)))
		b.WriteString(typ)
		b.Write(payload)
		_ = binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(append([]byte(typ), payload...)))
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 6 // 8 bits, RGBA; compression, filter and interlace 0
	chunk("IHDR", ihdr)
	if data {
		var z bytes.Buffer
		zw := zlib.NewWriter(&z)
		_, _ = zw.Write(make([]byte, 64))
		_ = zw.Close()
		chunk("IDAT", z.Bytes())
		chunk("IEND", nil)
	}
	return b.Bytes()
}

func heapAllocated() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// badCase is one request that must be refused. method/path default to POST /v1/videos.
type badCase struct {
	name         string
	method, path string
	in           payload
	status       int
	code, param  string
	msg          string // substring of the message
	viaJob       bool   // refused by the Task after admission: a failed job line, not a rejected one
	maxAlloc     uint64 // when set, the request may allocate at most this many bytes in this process
}

const (
	badMaxBody   = 256 << 10
	badMaxPixels = 1 << 20
	hex32        = "0123456789abcdef0123456789abcdef"
)

// TestBadInput sends every kind of malformed, unsupported or hostile request the API can get
// and checks that each is refused with the documented status, code and param, that the
// server stays healthy and writes nothing to disk, and that every refused submission has its
// "rejected" ledger line under the client's request id. Real jobs still complete at the end.
func TestBadInput(t *testing.T) {
	e := start(t, server.Config{MaxBodyBytes: badMaxBody, MaxPixels: badMaxPixels})
	ref := pngBytes(t, 96, 64, color.RGBA{40, 90, 200, 255})
	img := mpPart{"image", "ref.png", ref}
	one := []mpPart{img}
	bigRef := pngBytes(t, 1100, 1000, color.RGBA{1, 2, 3, 255}) // over MaxPixels, a real image

	// The 3000x3000 fixture is one a trusting decoder allocates ~36 MB for (checked here, so the
	// maxAlloc bound below means something); the server must refuse it from the header alone.
	bomb := pngHeader(3000, 3000, true)
	before := heapAllocated()
	_, _, err := image.Decode(bytes.NewReader(bomb))
	require.Error(t, err)
	require.Greater(t, heapAllocated()-before, uint64(30<<20), "fixture: a trusting decode allocates the image")

	cases := []badCase{
		// Body and Content-Type.
		{name: "no content type", in: rawBody("", "x"), status: 415, code: "unsupported_media_type", msg: "missing Content-Type"},
		{name: "text/plain", in: rawBody("text/plain", "prompt=x"), status: 415, code: "unsupported_media_type"},
		{name: "urlencoded form", in: rawBody("application/x-www-form-urlencoded", "model=ref-t2v&prompt=x"), status: 415, code: "unsupported_media_type"},
		{name: "multipart/mixed", in: rawBody("multipart/mixed; boundary=zz", "--zz--\r\n"), status: 415, code: "unsupported_media_type"},
		{name: "malformed content type", in: rawBody("multipart/form-data; boundary", "x"), status: 400, code: "invalid_request", msg: "malformed Content-Type"},
		{name: "malformed json content type", in: rawBody("application/json; charset", "{}"), status: 400, code: "invalid_request", msg: "malformed Content-Type"},
		{name: "multipart without boundary", in: rawBody("multipart/form-data", "x"), status: 400, code: "invalid_request", msg: "without a boundary"},
		{name: "multipart wrong boundary", in: rawBody("multipart/form-data; boundary=aaa", "--bbb\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nhi\r\n--bbb--\r\n"), status: 400, code: "invalid_request", msg: `no part delimited by the boundary "aaa"`},
		{name: "multipart empty body", in: rawBody("multipart/form-data; boundary=aaa", ""), status: 400, code: "invalid_request", msg: "no part delimited"},
		{name: "multipart truncated part", in: rawBody("multipart/form-data; boundary=zz", "--zz\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nref-t2v\r\n--zz\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nhi"), status: 400, code: "invalid_request", param: "prompt", msg: `reading multipart field "prompt": unexpected EOF`},
		{name: "multipart part without name", in: rawBody("multipart/form-data; boundary=zz", "--zz\r\nContent-Disposition: form-data; filename=\"a.txt\"\r\n\r\nhi\r\n--zz--\r\n"), status: 400, code: "invalid_request", msg: "without a form field name"},
		{name: "multipart part without disposition", in: rawBody("multipart/form-data; boundary=zz", "--zz\r\nX-Note: b\r\n\r\nhi\r\n--zz--\r\n"), status: 400, code: "invalid_request", msg: "without a form field name"},
		{name: "multipart duplicate field", in: mp(fieldsWith([]string{"model", "ref-t2v", "prompt", "a", "prompt", "b"})...), status: 400, code: "invalid_request", param: "prompt", msg: "more than once"},
		{name: "multipart file part", in: mp(append(fieldsWith([]string{"model", "ref-t2v", "prompt", "a"}), mpPart{"input_reference", "r.png", ref})...), status: 400, code: "unsupported_parameter", param: "input_reference", msg: "no input reference"},
		{name: "multipart field too long", in: vid("prompt", strings.Repeat("a", 70<<10)), status: 400, code: "invalid_request", param: "prompt", msg: "longer than 65536 bytes"},
		{name: "multipart body too large", in: vid("negative_prompt", strings.Repeat("a", 60<<10), "colour", strings.Repeat("b", 60<<10), "x1", strings.Repeat("c", 60<<10), "x2", strings.Repeat("d", 60<<10), "x3", strings.Repeat("e", 60<<10)), status: 413, code: "request_too_large", msg: fmt.Sprint(badMaxBody)},
		{name: "json body too large", in: jsonBody(`{"model":"ref-t2v","prompt":"` + strings.Repeat("a", 300<<10) + `"}`), status: 413, code: "request_too_large"},
		{name: "json empty body", in: jsonBody(""), status: 400, code: "invalid_request", msg: "not a JSON object"},
		{name: "json array", in: jsonBody(`[1,2]`), status: 400, code: "invalid_request", msg: "not a JSON object"},
		{name: "json null", in: jsonBody(`null`), status: 400, code: "invalid_request", msg: "not a JSON object"},
		{name: "json string", in: jsonBody(`"ref-t2v"`), status: 400, code: "invalid_request", msg: "not a JSON object"},
		{name: "json truncated", in: jsonBody(`{"model":"ref-t2v","prompt":`), status: 400, code: "invalid_request", msg: "not a JSON object"},
		{name: "json trailing object", in: jsonBody(`{"model":"ref-t2v","prompt":"x"} {}`), status: 400, code: "invalid_request", msg: "after the JSON object"},
		{name: "json trailing bracket", in: jsonBody(`{"model":"ref-t2v","prompt":"x"}]`), status: 400, code: "invalid_request", msg: "after the JSON object"},
		{name: "json duplicate key", in: jsonBody(`{"model":"ref-t2v","prompt":"a cat","prompt":""}`), status: 400, code: "invalid_request", param: "prompt", msg: "more than once"},
		{name: "json duplicate key after null", in: jsonBody(`{"model":"ref-t2v","prompt":"a cat","seed":null,"seed":3}`), status: 400, code: "invalid_request", param: "seed", msg: "more than once"},
		{name: "json nested object", in: jsonBody(`{"model":"ref-t2v","prompt":"x","size":{"w":320,"h":192}}`), status: 400, code: "invalid_request", param: "size", msg: "not an object"},
		{name: "json nested array", in: jsonBody(`{"model":"ref-t2v","prompt":"x","seed":[1]}`), status: 400, code: "invalid_request", param: "seed", msg: "not an array"},
		{name: "json unknown nested field", in: jsonBody(`{"model":"ref-t2v","prompt":"x","extra":{"a":{"b":1}}}`), status: 400, code: "invalid_request", param: "extra"},
		{name: "json unknown field", in: jsonBody(`{"model":"ref-t2v","prompt":"x","colour":"red"}`), status: 400, code: "unsupported_parameter", param: "colour", msg: "unknown parameter"},
		{name: "json fractional seed", in: jsonBody(`{"model":"ref-t2v","prompt":"x","seed":1.5}`), status: 400, code: "invalid_request", param: "seed", msg: "integer"},
		{name: "json seed 2^63", in: jsonBody(`{"model":"ref-t2v","prompt":"x","seed":9223372036854775808}`), status: 400, code: "unsupported_value", param: "seed", msg: "0..9223372036854775807"},
		{name: "json boolean frames", in: jsonBody(`{"model":"ref-t2v","prompt":"x","num_frames":true}`), status: 400, code: "invalid_request", param: "num_frames", msg: "integer"},
		{name: "json guidance overflow", in: jsonBody(`{"model":"ref-t2v","prompt":"x","guidance_scale":1e999}`), status: 400, code: "invalid_request", param: "guidance_scale", msg: "finite"},

		// Fields of POST /v1/videos, in the AIPerf form.
		{name: "unknown field", in: vid("colour", "red"), status: 400, code: "unsupported_parameter", param: "colour", msg: "unknown parameter"},
		{name: "n on videos", in: vid("n", "1"), status: 400, code: "unsupported_parameter", param: "n"},
		{name: "missing prompt", in: vid("prompt", "<absent>"), status: 400, code: "invalid_request", param: "prompt", msg: "prompt is required"},
		{name: "blank prompt", in: vid("prompt", " \t\n "), status: 400, code: "invalid_request", param: "prompt", msg: "prompt is required"},
		{name: "prompt too long", in: vid("prompt", strings.Repeat("é", 32001)), status: 400, code: "invalid_request", param: "prompt", msg: "32001 characters"},
		{name: "missing model", in: vid("model", "<absent>"), status: 400, code: "invalid_request", param: "model", msg: "model is required"},
		{name: "unknown model", in: vid("model", "sora-9"), status: 404, code: "model_not_found", param: "model", msg: "not served"},
		{name: "model path traversal", in: vid("model", "../ref-t2v"), status: 404, code: "model_not_found", param: "model"},
		{name: "capability mismatch", in: vid("model", "ref-edit"), status: 400, code: "model_capability_mismatch", param: "model", msg: "does not declare text_to_video"},
		{name: "size unsupported", in: vid("size", "1920x1080"), status: 400, code: "unsupported_value", param: "size", msg: "supported: 320x192"},
		{name: "size 5-digit unsupported", in: vid("size", "99999x99999"), status: 400, code: "unsupported_value", param: "size"},
		{name: "size word", in: vid("size", "big"), status: 400, code: "invalid_request", param: "size", msg: "WxH"},
		{name: "size empty", in: vid("size", ""), status: 400, code: "invalid_request", param: "size", msg: "WxH"},
		{name: "size negative", in: vid("size", "-320x192"), status: 400, code: "invalid_request", param: "size", msg: "WxH"},
		{name: "size 0x0", in: vid("size", "0x0"), status: 400, code: "invalid_request", param: "size", msg: "positive integers"},
		{name: "size x", in: vid("size", "x"), status: 400, code: "invalid_request", param: "size", msg: "WxH"},
		{name: "size exponent", in: vid("size", "1e3x2"), status: 400, code: "invalid_request", param: "size", msg: "WxH"},
		{name: "size unicode times", in: vid("size", "320×192"), status: 400, code: "invalid_request", param: "size", msg: "WxH"},
		{name: "size leading space", in: vid("size", " 320x192"), status: 400, code: "invalid_request", param: "size", msg: "WxH"},
		{name: "size trailing space", in: vid("size", "320x192 "), status: 400, code: "invalid_request", param: "size", msg: "WxH"},
		{name: "size capital X", in: vid("size", "320X192"), status: 400, code: "invalid_request", param: "size", msg: "WxH"},
		{name: "size three dims", in: vid("size", "320x192x1"), status: 400, code: "invalid_request", param: "size", msg: "WxH"},
		{name: "size 6 digits", in: vid("size", "000320x192"), status: 400, code: "invalid_request", param: "size", msg: "WxH"},
		{name: "size leading zero", in: vid("size", "0320x192"), status: 400, code: "invalid_request", param: "size", msg: "WxH"},
		{name: "size auto on video", in: vid("size", "auto"), status: 400, code: "invalid_request", param: "size", msg: "WxH"},
		{name: "frames off rule", in: vid("num_frames", "16"), status: 400, code: "unsupported_value", param: "num_frames", msg: "4k+1"},
		{name: "frames too many", in: vid("num_frames", "401"), status: 400, code: "unsupported_value", param: "num_frames", msg: "4k+1"},
		{name: "frames zero", in: vid("num_frames", "0"), status: 400, code: "unsupported_value", param: "num_frames", msg: "cannot produce 0 frames"},
		{name: "frames negative", in: vid("num_frames", "-5"), status: 400, code: "unsupported_value", param: "num_frames", msg: "cannot produce -5 frames"},
		{name: "frames fractional", in: vid("num_frames", "17.5"), status: 400, code: "invalid_request", param: "num_frames", msg: "integer"},
		{name: "frames NaN", in: vid("num_frames", "NaN"), status: 400, code: "invalid_request", param: "num_frames", msg: "integer"},
		{name: "frames Inf", in: vid("num_frames", "Inf"), status: 400, code: "invalid_request", param: "num_frames", msg: "integer"},
		{name: "frames hex", in: vid("num_frames", "0x11"), status: 400, code: "invalid_request", param: "num_frames", msg: "integer"},
		{name: "frames exponent", in: vid("num_frames", "1.7e1"), status: 400, code: "invalid_request", param: "num_frames", msg: "integer"},
		{name: "frames empty", in: vid("num_frames", ""), status: 400, code: "invalid_request", param: "num_frames", msg: "integer"},
		{name: "frames overflow", in: vid("num_frames", "99999999999999999999"), status: 400, code: "unsupported_value", param: "num_frames", msg: "out of range"},
		{name: "frames max int64", in: vid("num_frames", "9223372036854775807"), status: 400, code: "unsupported_value", param: "num_frames", msg: "4k+1"},
		{name: "fps unsupported", in: vid("fps", "30"), status: 400, code: "unsupported_value", param: "fps", msg: "[8 16 24]"},
		{name: "fps zero", in: vid("fps", "0"), status: 400, code: "unsupported_value", param: "fps"},
		{name: "fps negative", in: vid("fps", "-16"), status: 400, code: "unsupported_value", param: "fps"},
		{name: "fps fractional", in: vid("fps", "16.0"), status: 400, code: "invalid_request", param: "fps", msg: "integer"},
		{name: "fps NaN", in: vid("fps", "NaN"), status: 400, code: "invalid_request", param: "fps", msg: "integer"},
		{name: "fps hex", in: vid("fps", "0x10"), status: 400, code: "invalid_request", param: "fps", msg: "integer"},
		{name: "fps Inf", in: vid("fps", "Inf"), status: 400, code: "invalid_request", param: "fps", msg: "integer"},
		{name: "fps overflow", in: vid("fps", "1"+strings.Repeat("0", 30)), status: 400, code: "unsupported_value", param: "fps", msg: "out of range"},
		{name: "steps hex", in: vid("num_inference_steps", "0x4"), status: 400, code: "invalid_request", param: "num_inference_steps", msg: "integer"},
		{name: "steps Inf", in: vid("num_inference_steps", "+Inf"), status: 400, code: "invalid_request", param: "num_inference_steps", msg: "integer"},
		{name: "steps zero", in: vid("num_inference_steps", "0"), status: 400, code: "unsupported_value", param: "num_inference_steps", msg: "1..50"},
		{name: "steps too many", in: vid("num_inference_steps", "51"), status: 400, code: "unsupported_value", param: "num_inference_steps", msg: "1..50"},
		{name: "steps negative", in: vid("num_inference_steps", "-1"), status: 400, code: "unsupported_value", param: "num_inference_steps"},
		{name: "steps NaN", in: vid("num_inference_steps", "NaN"), status: 400, code: "invalid_request", param: "num_inference_steps", msg: "integer"},
		{name: "steps fractional", in: vid("num_inference_steps", "4.5"), status: 400, code: "invalid_request", param: "num_inference_steps", msg: "integer"},
		{name: "steps overflow", in: vid("num_inference_steps", "18446744073709551616"), status: 400, code: "unsupported_value", param: "num_inference_steps", msg: "out of range"},
		{name: "guidance NaN", in: vid("guidance_scale", "NaN"), status: 400, code: "invalid_request", param: "guidance_scale", msg: "finite"},
		{name: "guidance Inf", in: vid("guidance_scale", "Inf"), status: 400, code: "invalid_request", param: "guidance_scale", msg: "finite"},
		{name: "guidance -infinity", in: vid("guidance_scale", "-infinity"), status: 400, code: "invalid_request", param: "guidance_scale", msg: "finite"},
		{name: "guidance overflow", in: vid("guidance_scale", "1e400"), status: 400, code: "invalid_request", param: "guidance_scale", msg: "finite"},
		{name: "guidance hex float", in: vid("guidance_scale", "0x1p2"), status: 400, code: "invalid_request", param: "guidance_scale", msg: "decimal"},
		{name: "guidance comma", in: vid("guidance_scale", "5,0"), status: 400, code: "invalid_request", param: "guidance_scale", msg: "decimal"},
		{name: "guidance empty", in: vid("guidance_scale", ""), status: 400, code: "invalid_request", param: "guidance_scale"},
		{name: "guidance out of range", in: vid("guidance_scale", "99"), status: 400, code: "unsupported_value", param: "guidance_scale", msg: "0..20"},
		{name: "guidance negative", in: vid("guidance_scale", "-1"), status: 400, code: "unsupported_value", param: "guidance_scale", msg: "0..20"},
		{name: "guidance wrong spelling", in: vid("true_cfg_scale", "4"), status: 400, code: "unsupported_parameter", param: "true_cfg_scale", msg: "guidance_scale"},
		{name: "negative prompt unsupported", in: vid("negative_prompt", "blur"), status: 400, code: "unsupported_parameter", param: "negative_prompt", msg: "does not support"},
		{name: "seed negative", in: vid("seed", "-1"), status: 400, code: "unsupported_value", param: "seed", msg: "0.."},
		{name: "seed 2^63", in: vid("seed", "9223372036854775808"), status: 400, code: "unsupported_value", param: "seed", msg: "seed must be in 0..9223372036854775807, got 9223372036854775808"},
		{name: "seed below int64", in: vid("seed", "-9223372036854775809"), status: 400, code: "unsupported_value", param: "seed", msg: "seed must be in 0..9223372036854775807"},
		{name: "seed hex", in: vid("seed", "0x10"), status: 400, code: "invalid_request", param: "seed", msg: "integer"},
		{name: "seed exponent", in: vid("seed", "1e3"), status: 400, code: "invalid_request", param: "seed", msg: "integer"},
		{name: "seed fractional", in: vid("seed", "1.0"), status: 400, code: "invalid_request", param: "seed", msg: "integer"},
		{name: "seed NaN", in: vid("seed", "NaN"), status: 400, code: "invalid_request", param: "seed", msg: "integer"},
		{name: "seed Inf", in: vid("seed", "Inf"), status: 400, code: "invalid_request", param: "seed", msg: "integer"},
		{name: "seconds zero", in: vid("seconds", "0"), status: 400, code: "invalid_request", param: "seconds", msg: "positive"},
		{name: "seconds negative", in: vid("seconds", "-1"), status: 400, code: "invalid_request", param: "seconds", msg: "positive"},
		{name: "seconds NaN", in: vid("seconds", "NaN"), status: 400, code: "invalid_request", param: "seconds", msg: "positive"},
		{name: "seconds Inf", in: vid("seconds", "Inf"), status: 400, code: "invalid_request", param: "seconds", msg: "positive"},
		{name: "seconds empty", in: vid("seconds", ""), status: 400, code: "invalid_request", param: "seconds", msg: "positive"},
		{name: "seconds hex float", in: vid("seconds", "0x1.1p0"), status: 400, code: "invalid_request", param: "seconds", msg: "positive number"},
		{name: "seconds overflow", in: vid("seconds", "1e400"), status: 400, code: "invalid_request", param: "seconds", msg: "positive"},
		{name: "seconds huge", in: vid("seconds", "1e300"), status: 400, code: "unsupported_value", param: "seconds", msg: "is 1.6e+301 frames; supported frame counts: 4k+1"},
		{name: "seconds not whole frames", in: vid("seconds", "0.3", "fps", "16"), status: 400, code: "unsupported_value", param: "seconds", msg: "not a whole frame count"},
		{name: "seconds off frame rule", in: vid("seconds", "2", "fps", "16"), status: 400, code: "unsupported_value", param: "seconds", msg: "4k+1"},
		{name: "seconds disagree with frames", in: vid("seconds", "4", "num_frames", "17"), status: 400, code: "unsupported_value", param: "seconds", msg: "agree"},

		// POST /v1/images/edits.
		{name: "edit json", path: "/v1/images/edits", in: jsonBody(`{"model":"ref-edit","prompt":"invert"}`), status: 415, code: "unsupported_media_type", msg: "multipart/form-data"},
		{name: "edit text/plain", path: "/v1/images/edits", in: rawBody("text/plain", "x"), status: 415, code: "unsupported_media_type"},
		{name: "edit malformed content type", path: "/v1/images/edits", in: rawBody("multipart/form-data; boundary=", "x"), status: 400, code: "invalid_request", msg: "malformed Content-Type"},
		{name: "edit truncated multipart", path: "/v1/images/edits", in: func() payload {
			p := edit(one)
			p.body = p.body[:len(p.body)-40]
			return p
		}(), status: 400, code: "invalid_request", param: "image", msg: "unexpected EOF"},
		{name: "edit no image", path: "/v1/images/edits", in: edit(nil), status: 400, code: "invalid_request", param: "image", msg: "required"},
		{name: "edit image as text field", path: "/v1/images/edits", in: edit(nil, "image", string(ref)), status: 400, code: "invalid_request", param: "image", msg: "required"},
		{name: "edit two references", path: "/v1/images/edits", in: edit([]mpPart{{"image[]", "a.png", ref}, {"image[]", "b.png", ref}}), status: 400, code: "unsupported_value", param: "image", msg: "exactly one"},
		{name: "edit image and image[]", path: "/v1/images/edits", in: edit([]mpPart{img, {"image[]", "b.png", ref}}), status: 400, code: "unsupported_value", param: "image", msg: "got 2"},
		{name: "edit mask", path: "/v1/images/edits", in: edit([]mpPart{img, {"mask", "m.png", ref}}), status: 400, code: "unsupported_parameter", param: "mask", msg: "masks"},
		{name: "edit unknown file field", path: "/v1/images/edits", in: edit([]mpPart{img, {"reference", "r.png", ref}}), status: 400, code: "unsupported_parameter", param: "reference"},
		{name: "edit n=2", path: "/v1/images/edits", in: edit(one, "n", "2"), status: 400, code: "unsupported_value", param: "n", msg: "n must be 1"},
		{name: "edit n=0", path: "/v1/images/edits", in: edit(one, "n", "0"), status: 400, code: "unsupported_value", param: "n"},
		{name: "edit n word", path: "/v1/images/edits", in: edit(one, "n", "one"), status: 400, code: "unsupported_value", param: "n"},
		{name: "edit jpeg output", path: "/v1/images/edits", in: edit(one, "output_format", "jpeg"), status: 400, code: "unsupported_value", param: "output_format"},
		{name: "edit response format", path: "/v1/images/edits", in: edit(one, "response_format", "html"), status: 400, code: "unsupported_value", param: "response_format"},
		{name: "edit not an image", path: "/v1/images/edits", in: edit([]mpPart{{"image", "x.png", []byte("hello, not a picture")}}), status: 400, code: "invalid_request", param: "image", msg: "not a PNG, JPEG or WebP"},
		{name: "edit GIF", path: "/v1/images/edits", in: edit([]mpPart{{"image", "x.gif", []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;")}}), status: 400, code: "invalid_request", param: "image", msg: "not a PNG, JPEG or WebP"},
		{name: "edit empty file", path: "/v1/images/edits", in: edit([]mpPart{{"image", "x.png", nil}}), status: 400, code: "invalid_request", param: "image"},
		{name: "edit truncated png", path: "/v1/images/edits", in: edit([]mpPart{{"image", "x.png", ref[:len(ref)/2]}}), status: 400, code: "invalid_request", param: "image", msg: "could not be decoded", viaJob: true},
		{name: "edit png header only", path: "/v1/images/edits", in: edit([]mpPart{{"image", "x.png", pngHeader(64, 64, false)}}), status: 400, code: "invalid_request", param: "image", msg: "could not be decoded", viaJob: true},
		{name: "edit zero-size png", path: "/v1/images/edits", in: edit([]mpPart{{"image", "x.png", pngHeader(0, 64, true)}}), status: 400, code: "invalid_request", param: "image"},
		{name: "edit reference over max pixels", path: "/v1/images/edits", in: edit([]mpPart{{"image", "x.png", bigRef}}), status: 400, code: "invalid_request", param: "image", msg: "1100x1000; at most 1048576 pixels"},
		{name: "edit header claims 100000x100000", path: "/v1/images/edits", in: edit([]mpPart{{"image", "x.png", pngHeader(100000, 100000, false)}}), status: 400, code: "invalid_request", param: "image", msg: "100000x100000", maxAlloc: 8 << 20},
		{name: "edit 100000x100000 with data", path: "/v1/images/edits", in: edit([]mpPart{{"image", "x.png", pngHeader(100000, 100000, true)}}), status: 400, code: "invalid_request", param: "image", msg: "100000x100000", maxAlloc: 8 << 20},
		{name: "edit 3000x3000 with data", path: "/v1/images/edits", in: edit([]mpPart{{"image", "x.png", bomb}}), status: 400, code: "invalid_request", param: "image", msg: "3000x3000", maxAlloc: 8 << 20},
		{name: "edit header claims 2^31-1 square", path: "/v1/images/edits", in: edit([]mpPart{{"image", "x.png", pngHeader(1<<31-1, 1<<31-1, true)}}), status: 400, code: "invalid_request", param: "image", maxAlloc: 8 << 20},
		{name: "edit oversized upload", path: "/v1/images/edits", in: edit([]mpPart{{"image", "x.png", bytes.Repeat([]byte{0x89}, 400<<10)}}), status: 413, code: "request_too_large"},
		{name: "edit video model", path: "/v1/images/edits", in: edit(one, "model", "ref-t2v"), status: 400, code: "model_capability_mismatch", param: "model", msg: "does not declare image_edit"},
		{name: "edit unknown model", path: "/v1/images/edits", in: edit(one, "model", "dall-e-9"), status: 404, code: "model_not_found", param: "model"},
		{name: "edit missing model", path: "/v1/images/edits", in: edit(one, "model", "<absent>"), status: 400, code: "invalid_request", param: "model"},
		{name: "edit missing prompt", path: "/v1/images/edits", in: edit(one, "prompt", "<absent>"), status: 400, code: "invalid_request", param: "prompt"},
		{name: "edit unsupported size", path: "/v1/images/edits", in: edit(one, "size", "1000x1000"), status: 400, code: "unsupported_value", param: "size", msg: "or auto"},
		{name: "edit bad size", path: "/v1/images/edits", in: edit(one, "size", "0x0"), status: 400, code: "invalid_request", param: "size"},
		{name: "edit unknown field", path: "/v1/images/edits", in: edit(one, "quality", "high"), status: 400, code: "unsupported_parameter", param: "quality"},
		{name: "edit seconds", path: "/v1/images/edits", in: edit(one, "seconds", "1"), status: 400, code: "unsupported_parameter", param: "seconds"},
		{name: "edit num_frames", path: "/v1/images/edits", in: edit(one, "num_frames", "5"), status: 400, code: "unsupported_parameter", param: "num_frames"},
		{name: "edit steps NaN", path: "/v1/images/edits", in: edit(one, "num_inference_steps", "NaN"), status: 400, code: "invalid_request", param: "num_inference_steps"},
		{name: "edit guidance out of range", path: "/v1/images/edits", in: edit(one, "guidance_scale", "11"), status: 400, code: "unsupported_value", param: "guidance_scale", msg: "0..10"},
		{name: "edit instruction outside vocabulary", path: "/v1/images/edits", in: edit(one, "prompt", "add a hat"), status: 400, code: "unsupported_instruction", param: "prompt", viaJob: true},

		// Id routes and listing: no id reaches the filesystem, and every miss is a clean 404.
		{name: "GET traversal", method: "GET", path: "/v1/videos/..%2F..%2Fetc%2Fpasswd", status: 404, code: "video_not_found", param: "id"},
		{name: "GET content traversal", method: "GET", path: "/v1/videos/..%2F..%2Fetc%2Fpasswd/content", status: 404, code: "video_not_found", param: "id"},
		{name: "DELETE traversal", method: "DELETE", path: "/v1/videos/..%2F..%2Fetc%2Fpasswd", status: 404, code: "video_not_found", param: "id"},
		{name: "GET unescaped traversal", method: "GET", path: "/v1/videos/../../etc/passwd", status: 404, code: "not_found"},
		{name: "GET content right-to-left override", method: "GET", path: "/v1/videos/video_%E2%80%AE" + hex32 + "/content", status: 404, code: "video_not_found", param: "id"},
		{name: "DELETE emoji id", method: "DELETE", path: "/v1/videos/video_%F0%9F%98%80", status: 404, code: "video_not_found", param: "id"},
		{name: "GET NUL id", method: "GET", path: "/v1/videos/%00", status: 404, code: "video_not_found", param: "id"},
		{name: "GET id with newline", method: "GET", path: "/v1/videos/video_" + hex32 + "%0A", status: 404, code: "video_not_found", param: "id"},
		{name: "GET slash in id", method: "GET", path: "/v1/videos/video_a%2Fb/content", status: 404, code: "video_not_found", param: "id"},
		{name: "GET non-hex id", method: "GET", path: "/v1/videos/video_zz", status: 404, code: "video_not_found", param: "id"},
		{name: "GET upper-case id", method: "GET", path: "/v1/videos/VIDEO_" + strings.ToUpper(hex32), status: 404, code: "video_not_found", param: "id"},
		{name: "GET long id", method: "GET", path: "/v1/videos/video_" + strings.Repeat("a", 4000), status: 404, code: "video_not_found", param: "id"},
		{name: "DELETE unknown well-formed id", method: "DELETE", path: "/v1/videos/video_" + hex32, status: 404, code: "video_not_found", param: "id", msg: "no video with id"},
		{name: "GET image id on video route", method: "GET", path: "/v1/videos/img_" + hex32 + "/content", status: 404, code: "video_not_found", param: "id"},
		{name: "GET image content traversal", method: "GET", path: "/v1/images/..%2Fx/content", status: 404, code: "image_not_found", param: "id"},
		{name: "DELETE image emoji id", method: "DELETE", path: "/v1/images/%F0%9F%98%80", status: 404, code: "image_not_found", param: "id"},
		{name: "GET video id on image route", method: "GET", path: "/v1/images/video_" + hex32 + "/content", status: 404, code: "image_not_found", param: "id"},
		{name: "DELETE image empty id", method: "DELETE", path: "/v1/images/", status: 404, code: "not_found"},
		{name: "GET image object (no such route)", method: "GET", path: "/v1/images/img_" + hex32, status: 404, code: "not_found"},
		{name: "PUT videos", method: "PUT", path: "/v1/videos", status: 404, code: "not_found"},
		{name: "list limit zero", method: "GET", path: "/v1/videos?limit=0", status: 400, code: "invalid_request", param: "limit"},
		{name: "list limit word", method: "GET", path: "/v1/videos?limit=abc", status: 400, code: "invalid_request", param: "limit"},
		{name: "list limit too big", method: "GET", path: "/v1/videos?limit=101", status: 400, code: "invalid_request", param: "limit"},
		{name: "list order", method: "GET", path: "/v1/videos?order=sideways", status: 400, code: "invalid_request", param: "order"},
		{name: "list after unknown", method: "GET", path: "/v1/videos?after=video_" + hex32, status: 400, code: "invalid_request", param: "after"},
	}

	for i := range cases {
		if cases[i].method == "" {
			cases[i].method = "POST"
		}
		if cases[i].path == "" {
			cases[i].path = "/v1/videos"
		}
	}
	for i, tc := range cases {
		reqID := fmt.Sprintf("bad-%03d", i)
		t.Run(tc.name, func(t *testing.T) {
			before := heapAllocated()
			r := e.do(t, tc.method, tc.path, tc.in.ct, bytes.NewReader(tc.in.body), "X-Request-ID", reqID)
			allocated := heapAllocated() - before
			require.Equal(t, tc.status, r.status, "%s", r.body)
			assert.Equal(t, "application/json", r.header.Get("Content-Type"))
			assert.Equal(t, reqID, r.header.Get("X-Request-ID"))
			ae := r.apiErr(t)
			assert.Equal(t, tc.code, ae["code"])
			param, _ := ae["param"].(string)
			assert.Equal(t, tc.param, param, "param")
			msg, _ := ae["message"].(string)
			assert.NotEmpty(t, msg)
			assert.Contains(t, msg, tc.msg)
			assert.NotEmpty(t, ae["type"])
			if tc.maxAlloc > 0 {
				assert.Less(t, allocated, tc.maxAlloc, "the request allocated %d MiB", allocated>>20)
			}
			if tc.status == 429 {
				assert.NotEmpty(t, r.header.Get("Retry-After"))
			}
			assert.Equal(t, 200, e.do(t, "GET", "/health", "", nil).status, "still serving")
			assert.Empty(t, e.files(t), "nothing written to the artifact dir")
		})
	}

	t.Run("ledger agrees", func(t *testing.T) {
		byReq := map[string][]server.LedgerEntry{}
		for _, l := range e.ledger.entries(t) {
			byReq[l.RequestID] = append(byReq[l.RequestID], l)
		}
		for i, tc := range cases {
			reqID := fmt.Sprintf("bad-%03d", i)
			lines := byReq[reqID]
			if tc.method != "POST" {
				if tc.method == "GET" {
					assert.Empty(t, lines, "GETs are not written to the ledger: %s", reqID)
				}
				continue
			}
			if !assert.Len(t, lines, 1, "%s (%s)", reqID, tc.name) {
				continue
			}
			l := lines[0]
			require.NotNil(t, l.Error, tc.name)
			assert.Equal(t, tc.code, l.Error.Code, tc.name)
			if tc.viaJob {
				assert.Equal(t, "job", l.Event, tc.name)
				assert.Equal(t, "failed", l.Status, tc.name)
				continue
			}
			assert.Equal(t, "rejected", l.Event, tc.name)
			assert.Equal(t, tc.status, l.HTTPStatus, tc.name)
			assert.Equal(t, tc.path, strings.TrimPrefix(l.Route, "POST "), tc.name)
		}
	})

	t.Run("still serves real jobs", func(t *testing.T) {
		// seconds alone set the frame count: 0.3125 s at 16 fps is 5 frames (4k+1).
		r := e.postForm(t, "/v1/videos", map[string]string{"model": "ref-t2v", "prompt": "a red ball", "size": "160x96",
			"seconds": "0.3125", "fps": "16", "num_inference_steps": "1"})
		require.Equal(t, 200, r.status, "%s", r.body)
		assert.EqualValues(t, 5, r.json(t)["settings"].(map[string]any)["num_frames"])
		vidID := r.json(t)["id"].(string)
		done := e.waitVideo(t, vidID)
		require.Equal(t, "completed", done["status"], "%v", done)
		assert.EqualValues(t, 5, done["actual"].(map[string]any)["num_frames"])

		r = e.postForm(t, "/v1/images/edits", map[string]string{"model": "ref-edit", "prompt": "invert the colours", "size": "auto", "response_format": "url"}, part{"image", "ref.png", ref})
		require.Equal(t, 200, r.status, "%s", r.body)
		imgID := r.json(t)["id"].(string)

		// A real id of the other kind is still a 404 on the wrong route.
		assert.Equal(t, "video_not_found", e.do(t, "GET", "/v1/videos/"+imgID+"/content", "", nil).apiErr(t)["code"])
		assert.Equal(t, "image_not_found", e.do(t, "GET", "/v1/images/"+vidID+"/content", "", nil).apiErr(t)["code"])
		assert.Equal(t, 404, e.do(t, "DELETE", "/v1/images/"+vidID, "", nil).status)
		assert.Len(t, e.files(t), 2)
		assert.Equal(t, 200, e.do(t, "DELETE", "/v1/videos/"+vidID, "", nil).status)
		assert.Equal(t, 200, e.do(t, "DELETE", "/v1/images/"+imgID, "", nil).status)
		assert.Empty(t, e.files(t))
	})
}
