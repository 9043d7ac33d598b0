package server

import (
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The streamed answer decodes to exactly what encoding/json writes for the same fields.
func TestInlineImageIsTheJSONAnswer(t *testing.T) {
	img := make([]byte, 2*base64Piece+100_003) // three pieces; not a multiple of 3: padding
	for i := range img {
		img[i] = byte(rand.IntN(256))
	}
	fields := map[string]any{"id": "img_1", "size": "64x48", "html": "<&>", "timing": map[string]float64{"encode_ms": 1.5}}
	rec := httptest.NewRecorder()
	writeInlineImage(rec, img, fields)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.Equal(t, strconv.Itoa(rec.Body.Len()), rec.Header().Get("Content-Length"))
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

// encodeBase64 over the cores is base64.StdEncoding's encoding at every length, whatever the
// pieces (lengths around the piece size and multiples of 3, padding of 0, 1 or 2), its parts
// joined in order.
func TestEncodeBase64(t *testing.T) {
	src := make([]byte, 4*base64Piece+2)
	for i := range src {
		src[i] = byte(rand.IntN(256))
	}
	var lengths []int
	for _, k := range []int{0, base64Piece, 2 * base64Piece, 4 * base64Piece} {
		for d := range 3 {
			lengths = append(lengths, k+d)
		}
	}
	for _, procs := range []int{1, 2, 3, 7} {
		prev := runtime.GOMAXPROCS(procs)
		for _, n := range append(lengths, base64Piece-1, 3*base64Piece-2, 3*base64Piece/2+1) {
			parts := encodeBase64(src[:n])
			require.Len(t, parts, (n+base64Piece-1)/base64Piece)
			var dst []byte
			for i := range parts {
				<-parts[i].done
				dst = append(dst, parts[i].b64...)
			}
			require.Equal(t, base64.StdEncoding.EncodeToString(src[:n]), string(dst), "%d bytes, GOMAXPROCS %d", n, procs)
		}
		runtime.GOMAXPROCS(prev)
	}
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
	b.Run("pieces", func(b *testing.B) {
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
