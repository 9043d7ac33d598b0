package server

import (
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The streamed answer decodes to exactly what encoding/json writes for the same fields.
func TestInlineImageIsTheJSONAnswer(t *testing.T) {
	img := make([]byte, 100_003) // not a multiple of 3: base64 padding
	for i := range img {
		img[i] = byte(rand.IntN(256))
	}
	fields := map[string]any{"id": "img_1", "size": "64x48", "html": "<&>", "timing": map[string]float64{"encode_ms": 1.5}}
	rec := httptest.NewRecorder()
	writeInlineImage(rec, img, fields)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.Contains(t, rec.Body.String(), `"html":"<&>"`, "no HTML escaping, as writeJSON")
	var got map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))

	want := map[string]any{"data": []any{map[string]any{"b64_json": base64.StdEncoding.EncodeToString(img)}}}
	for k, v := range fields {
		want[k] = v
	}
	wantJSON, err := json.Marshal(want)
	require.NoError(t, err)
	var wantObj map[string]any
	require.NoError(t, json.Unmarshal(wantJSON, &wantObj))
	assert.Equal(t, wantObj, got)
}

type discard struct{ h http.Header }

func (d discard) Header() http.Header       { return d.h }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// BenchmarkInlineImage: the answer to a b64_json edit of a 1024² noise-like PNG (3 MiB, about
// what L0 edits give), written by writeInlineImage and, for comparison, the way it was written
// before (base64 to a string, then encoding/json).
//
//	go test -run '^$' -bench InlineImage -benchtime 50x ./server/
func BenchmarkInlineImage(b *testing.B) {
	img := make([]byte, 3<<20)
	for i := range img {
		img[i] = byte(rand.IntN(256))
	}
	fields := map[string]any{"id": "img_1", "size": "1024x1024", "output_format": "png"}
	w := discard{http.Header{}}
	b.Run("streamed", func(b *testing.B) {
		for b.Loop() {
			writeInlineImage(w, img, fields)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			answer := map[string]any{"data": []any{map[string]any{"b64_json": base64.StdEncoding.EncodeToString(img)}}}
			for k, v := range fields {
				answer[k] = v
			}
			writeJSON(w, http.StatusOK, answer)
		}
	})
}
