package qualify

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/check/checktest"
	"github.com/mediaqual/mediaqual/harness/client"
	"github.com/mediaqual/mediaqual/harness/wire"
)

// Cleanup deletes every job the suite created, whatever failed before it (here the aiperf stage
// gave it no requests at all: a failed run), and holds each job and its content to a 404
// after. The endpoint refuses one delete and keeps serving one deleted job's content: both are
// named, and the third job is still deleted. Shown failing by deleting only the artifacts
// stage's requests (as before: no job deleted, and the stage passed) and by leaving out the
// content's GET (the content still downloading passed).
func TestCleanupDeletesEveryJobAndChecksItsContent(t *testing.T) {
	var mu sync.Mutex
	deleted := map[string]bool{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/videos/"), "/content")
		switch {
		case r.Method == http.MethodDelete && id == "video_stuck":
			w.WriteHeader(http.StatusInternalServerError)
		case r.Method == http.MethodDelete:
			deleted[id] = true
			_, _ = w.Write([]byte(`{"id":"` + id + `","object":"video.deleted","deleted":true}`))
		case strings.HasSuffix(r.URL.Path, "/content") && id == "video_cached":
			w.Header().Set("Content-Type", "video/mp4")
			_, _ = w.Write([]byte("mp4"))
		case deleted[id]:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"video_not_found","message":"gone"}}`))
		default:
			_, _ = w.Write([]byte(`{"id":"` + id + `","object":"video","status":"in_progress"}`))
		}
	}))
	defer hs.Close()
	e := lookup(t, "ref-t2v")
	row := NewRow(e)
	cfg := Defaults()
	cfg.Target.Endpoint = hs.URL
	c := &caseRun{T: t, Entry: e, Config: cfg, Row: &row, ctx: context.Background()}
	c.createdJobs("video_stuck", "video_cached", "video_hung", "video_hung", "")
	s := &serving{URL: hs.URL, Profile: wire.Mediaserve, External: true,
		API: &client.Client{BaseURL: hs.URL, PollEvery: 10 * time.Millisecond, HTTP: hs.Client(), Profile: wire.Mediaserve}}
	_, err := c.cleanup(s, artifactSet{})
	require.Error(t, err)
	assert.Equal(t, []string{"delete"}, check.Names(err))
	checktest.Failed(t, err, "delete")
	assert.ErrorContains(t, err, "video_stuck")
	assert.ErrorContains(t, err, "the content of video_cached still answers after delete")
	assert.NotContains(t, err.Error(), "video_hung")
	assert.True(t, deleted["video_hung"] && deleted["video_cached"], "every job deleted, the one after a failure too: %v", deleted)
	assert.Equal(t, 3, len(c.jobs), "each job once: %v", c.jobs)
	assert.False(t, slices.Contains(c.jobs, ""))
}
