package qualify

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/aiperf"
	"github.com/mediaqual/mediaqual/harness/client"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models/spec"
)

// An endpoint's account joins each job to its AIPerf request on the X-Request-ID the endpoint
// echoes on the job's poll: echoed, it holds; another request's id, the accounting fails;
// none, the join rests on AIPerf's record and the row says so and is limited. Shown failing
// by filing each job under AIPerf's id, as before: the swapping and the silent endpoints both
// passed without a word.
func TestEndpointAccountJoinsOnTheEcho(t *testing.T) {
	for _, mode := range []string{"echo", "swap", "none"} {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch id := r.Header.Get("X-Request-ID"); mode {
			case "echo":
				w.Header().Set("X-Request-ID", id)
			case "swap":
				w.Header().Set("X-Request-ID", strings.NewReplacer("r1", "r2", "r2", "r1").Replace(id))
			}
			job := strings.TrimPrefix(r.URL.Path, "/v1/videos/")
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"` + job + `","object":"video","status":"completed","progress":100}`))
		}))
		e := lookup(t, "ref-t2v")
		row := NewRow(e)
		cfg := Defaults()
		cfg.Target.Endpoint = hs.URL
		c := &caseRun{T: t, Entry: e, Config: cfg, Row: &row, ctx: t.Context()}
		s := &serving{URL: hs.URL, Profile: wire.Mediaserve, External: true,
			API: &client.Client{BaseURL: hs.URL, PollEvery: 10 * time.Millisecond, HTTP: hs.Client(), Profile: wire.Mediaserve}}
		var x aiperf.Exports
		for _, id := range []string{"r1", "r2"} {
			x.Raw = append(x.Raw, aiperf.RawRecord{Responses: []aiperf.RawResponse{{Text: `{"id":"video_` + id + `","status":"queued"}`}}})
			x.Raw[len(x.Raw)-1].Meta.XRequestID = id
		}
		entries, err := c.account(s, x)
		require.NoError(t, err, mode)
		accountErr := aiperf.Account(aiperf.Join(x, entries), entries)
		switch mode {
		case "echo":
			assert.NoError(t, accountErr)
			assert.Empty(t, c.echoed())
		case "swap":
			assert.ErrorContains(t, accountErr, "client saw job video_r1, the ledger's line is for video_r2")
		case "none":
			assert.NoError(t, accountErr, "joined on AIPerf's record")
			assert.Contains(t, c.echoed(), "echoed no X-Request-ID on the polls of 2 jobs")
			require.Len(t, row.Limits, 1)
			assert.Equal(t, spec.FamilyValidated, row.Limits[0].Ceiling)
		}
		hs.Close()
	}
}
