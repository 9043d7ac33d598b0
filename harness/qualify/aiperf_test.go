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

// An endpoint's account ties each job to its AIPerf request only on the endpoint's own word:
// the create's X-Request-ID in the job (request_id), polled with a fresh X-Request-ID. A
// middleware that mirrors each request's header ties nothing: the join rests on AIPerf's
// record of the create's answer, and the row says so and is limited (before, a mirror was
// reported as "each joined on the X-Request-ID the endpoint echoed"). A job naming another
// request fails the accounting.
func TestEndpointAccountJoinsOnlyOnTheEndpointsTie(t *testing.T) {
	for _, mode := range []string{"tied", "mirror", "swap", "none"} {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			job := strings.TrimPrefix(r.URL.Path, "/v1/videos/")
			made := ""
			switch made = strings.TrimPrefix(job, "video_"); mode {
			case "mirror":
				w.Header().Set("X-Request-ID", r.Header.Get("X-Request-ID"))
				made = ""
			case "swap":
				made = strings.NewReplacer("r1", "r2", "r2", "r1").Replace(made)
			case "none":
				made = ""
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"` + job + `","object":"video","status":"completed","progress":100,"request_id":"` + made + `"}`))
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
		case "tied":
			assert.NoError(t, accountErr)
			assert.Empty(t, c.tied())
		case "swap":
			assert.ErrorContains(t, accountErr, "client saw job video_r1, the ledger's line is for video_r2")
		case "mirror", "none":
			assert.NoError(t, accountErr, "joined on AIPerf's record")
			assert.Contains(t, c.tied(), "does not say which request made 2 jobs")
			require.Len(t, row.Limits, 1)
			assert.Equal(t, spec.FamilyValidated, row.Limits[0].Ceiling)
		}
		hs.Close()
	}
}
