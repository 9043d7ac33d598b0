package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
)

// Load: loadSubmissions video jobs from loadClients concurrent clients against one lane with a
// queue of loadQueue. Each job is a 32x32, 5-frame clip from a Task that takes loadTaskDelay,
// so the ffmpeg encode (process start + x264 init, ~75 ms) is most of each job's time and the
// lane completes roughly ten jobs a second; everything beyond the queue is refused with 429.
// A refused client waits loadBackoff (a quarter of the smallest Retry-After, to keep the test
// short) before its next submission, so the submissions spread over a few seconds and the
// lane is kept busy instead of all 500 arriving before the first job ends.
const (
	loadSubmissions = 500
	loadClients     = 64
	loadQueue       = 8
	loadTaskDelay   = 3 * time.Millisecond
	loadBackoff     = 250 * time.Millisecond
	loadRSSBound    = 300 << 20 // generous: the figures recorded in docs/PERFORMANCE.md are far below
)

// memStatus reads VmRSS and VmHWM (peak RSS) of this process, in bytes.
func memStatus(t *testing.T) (rss, hwm int64) {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		require.NoError(t, err, "%s", sc.Text())
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	require.NotZero(t, rss)
	return rss, hwm
}

// resetPeakRSS makes VmHWM start again from the current RSS (Linux: clear_refs "5"), so the
// peak reported covers the load alone rather than everything this test binary did before.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

type loadOutcome struct {
	accepted map[string]string // request id -> job id
	refused  []string          // request ids answered 429
	wall     time.Duration
	// client-side latencies: POST answered 429, POST answered 200, and accepted -> seen ended
	refusedMS, admitMS, jobMS []float64
}

func percentile(ms []float64, p int) float64 {
	if len(ms) == 0 {
		return 0
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// runLoad submits n jobs from c clients. A client whose job is accepted polls it (every 5 ms)
// until it ends; expiring says a job may be gone (404 "expired") by the time it is polled.
func runLoad(t *testing.T, e *env, n, c int, expiring bool) loadOutcome {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	do := func(method, path, ct string, body []byte, reqID string) (int, http.Header, []byte, error) {
		req, err := http.NewRequest(method, e.http.URL+path, bytes.NewReader(body))
		if err != nil {
			return 0, nil, nil, err
		}
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if reqID != "" {
			req.Header.Set("X-Request-ID", reqID)
			req.Header.Set("X-Correlation-ID", "load-session")
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b, err
	}

	var (
		next int64
		mu   sync.Mutex
		out  = loadOutcome{accepted: map[string]string{}}
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := atomic.AddInt64(&next, 1) - 1
				if i >= int64(n) {
					return
				}
				reqID := fmt.Sprintf("load-%04d", i)
				body, ct := multipartBody(t, map[string]string{"model": "fake", "prompt": "load " + reqID,
					"size": "32x32", "num_frames": "5", "fps": "8", "seed": strconv.FormatInt(i, 10)})
				b, _ := io.ReadAll(body)
				t0 := time.Now()
				status, hdr, resp, err := do("POST", "/v1/videos", ct, b, reqID)
				took := float64(time.Since(t0).Microseconds()) / 1000
				if err != nil {
					t.Errorf("%s: %v", reqID, err)
					continue
				}
				var obj struct {
					ID    string `json:"id"`
					Error struct {
						Code string `json:"code"`
					} `json:"error"`
				}
				if err := json.Unmarshal(resp, &obj); err != nil {
					t.Errorf("%s: %d %s", reqID, status, resp)
					continue
				}
				switch status {
				case 429:
					ra, err := strconv.Atoi(hdr.Get("Retry-After"))
					if obj.Error.Code != "server_busy" || err != nil || ra < 1 {
						t.Errorf("%s: 429 with code %q, Retry-After %q", reqID, obj.Error.Code, hdr.Get("Retry-After"))
					}
					mu.Lock()
					out.refused = append(out.refused, reqID)
					out.refusedMS = append(out.refusedMS, took)
					mu.Unlock()
					time.Sleep(loadBackoff)
					continue
				case 200:
					mu.Lock()
					out.accepted[reqID] = obj.ID
					out.admitMS = append(out.admitMS, took)
					mu.Unlock()
				default:
					t.Errorf("%s: unexpected %d %s", reqID, status, resp)
					continue
				}
				for { // poll until the job ends
					status, _, resp, err := do("GET", "/v1/videos/"+obj.ID, "", nil, "")
					if err != nil {
						t.Errorf("%s: poll: %v", reqID, err)
						break
					}
					if status == 404 && expiring && bytes.Contains(resp, []byte("expired")) {
						break // it completed and has already expired; the ledger says how it ended
					}
					var v struct{ Status string }
					if status != 200 || json.Unmarshal(resp, &v) != nil {
						t.Errorf("%s: poll: %d %s", reqID, status, resp)
						break
					}
					if v.Status == "completed" {
						break
					}
					if v.Status == "failed" {
						t.Errorf("%s: job failed: %s", reqID, resp)
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				mu.Lock()
				out.jobMS = append(out.jobMS, float64(time.Since(t0).Microseconds())/1000)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	out.wall = time.Since(start)
	return out
}

// checkLedger: every accepted request has exactly one terminal job line (completed, with the
// job id the client got) and every 429 exactly one rejected line, under the client's request id.
func checkLedger(t *testing.T, e *env, out loadOutcome) {
	t.Helper()
	jobs, rejected := map[string][]server.LedgerEntry{}, map[string][]server.LedgerEntry{}
	for _, l := range e.ledger.entries(t) {
		switch l.Event {
		case "job":
			jobs[l.RequestID] = append(jobs[l.RequestID], l)
		case "rejected":
			rejected[l.RequestID] = append(rejected[l.RequestID], l)
		}
	}
	assert.Len(t, jobs, len(out.accepted), "job lines")
	assert.Len(t, rejected, len(out.refused), "rejected lines")
	for reqID, id := range out.accepted {
		if assert.Len(t, jobs[reqID], 1, reqID) {
			l := jobs[reqID][0]
			assert.Equal(t, id, l.JobID, reqID)
			assert.Equal(t, "completed", l.Status, reqID)
			assert.Equal(t, "load-session", l.CorrelationID, reqID)
		}
		assert.Empty(t, rejected[reqID], reqID)
	}
	for _, reqID := range out.refused {
		if assert.Len(t, rejected[reqID], 1, reqID) {
			l := rejected[reqID][0]
			assert.Equal(t, 429, l.HTTPStatus, reqID)
			assert.Equal(t, "server_busy", l.Error.Code, reqID)
			assert.Equal(t, "fake", l.Model, reqID)
		}
		assert.Empty(t, jobs[reqID], reqID)
	}
}

func loadServer(t *testing.T, cfg server.Config) *env {
	cfg.QueueCapacity = loadQueue
	cfg.Models = []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: &fakeTask{delay: loadTaskDelay}}}
	return start(t, cfg)
}

// TestLoad: loadSubmissions submissions at concurrency loadClients against a queue of
// loadQueue. Every one completes or is refused with 429 + Retry-After, the ledger and the
// client agree on every request, memory stays bounded, and after deleting everything no
// artifact is left. Figures are logged (go test -run TestLoad -v) and recorded in
// docs/PERFORMANCE.md.
func TestLoad(t *testing.T) {
	e := loadServer(t, server.Config{})
	runtime.GC()
	rssBefore, _ := memStatus(t)
	peakReset := resetPeakRSS()
	goroutines := runtime.NumGoroutine()

	out := runLoad(t, e, loadSubmissions, loadClients, false)

	rssAfter, hwm := memStatus(t)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("load: %d submissions, %d clients, queue %d: %d accepted, %d refused (429) in %v (%.0f submissions/s, %.1f jobs/s)",
		loadSubmissions, loadClients, loadQueue, len(out.accepted), len(out.refused), out.wall.Round(time.Millisecond),
		float64(loadSubmissions)/out.wall.Seconds(), float64(len(out.accepted))/out.wall.Seconds())
	t.Logf("load: client latency p50/p99: 429 answer %.2f/%.2f ms, 200 answer %.2f/%.2f ms, accepted job to completed %.0f/%.0f ms",
		percentile(out.refusedMS, 50), percentile(out.refusedMS, 99), percentile(out.admitMS, 50), percentile(out.admitMS, 99),
		percentile(out.jobMS, 50), percentile(out.jobMS, 99))
	t.Logf("load: RSS before %d MiB, after %d MiB, peak %d MiB (peak reset before the load: %v); Go heap sys %d MiB",
		rssBefore>>20, rssAfter>>20, hwm>>20, peakReset, ms.HeapSys>>20)
	require.Equal(t, loadSubmissions, len(out.accepted)+len(out.refused), "every submission completed or was refused")
	assert.Greater(t, len(out.accepted), loadQueue, "more than one queue's worth completed")
	assert.NotEmpty(t, out.refused, "the queue overflowed")
	assert.Less(t, rssAfter-rssBefore, int64(loadRSSBound), "RSS growth")
	assert.Less(t, hwm-rssBefore, int64(loadRSSBound), "peak RSS over the starting RSS")

	checkLedger(t, e, out)
	assert.Len(t, e.files(t), len(out.accepted), "one artifact per completed job until deleted")
	for _, id := range out.accepted {
		assert.Equal(t, 200, e.do(t, "DELETE", "/v1/videos/"+id, "", nil).status, id)
	}
	assert.Empty(t, e.files(t), "no artifact left after deleting every job")
	assert.Equal(t, len(out.accepted), countStatus(e.ledger.entries(t), "delete", "deleted"))
	assert.Eventually(t, func() bool { return runtime.NumGoroutine() <= goroutines+10 }, 5*time.Second, 50*time.Millisecond,
		"goroutines back near %d (now %d)", goroutines, runtime.NumGoroutine())
}

// TestLoadExpiry is TestLoad with a short artifact lifetime: nothing is deleted, and the
// janitor alone removes every artifact, each with its expire line.
func TestLoadExpiry(t *testing.T) {
	e := loadServer(t, server.Config{Lifetime: 200 * time.Millisecond, JanitorEvery: 20 * time.Millisecond})
	out := runLoad(t, e, loadSubmissions, loadClients, true)
	t.Logf("load with expiry: %d accepted, %d refused in %v", len(out.accepted), len(out.refused), out.wall.Round(time.Millisecond))
	require.Equal(t, loadSubmissions, len(out.accepted)+len(out.refused))
	checkLedger(t, e, out)
	require.Eventually(t, func() bool { return len(e.files(t)) == 0 }, 5*time.Second, 20*time.Millisecond,
		"the janitor removes every artifact")
	require.Eventually(t, func() bool {
		return countStatus(e.ledger.entries(t), "expire", "expired") == len(out.accepted)
	}, 5*time.Second, 20*time.Millisecond, "one expire line per job")
	expired := map[string]bool{}
	for _, l := range e.ledger.entries(t) {
		if l.Event == "expire" {
			expired[l.JobID] = true
			assert.Equal(t, []string{l.JobID + ".mp4"}, l.FilesRemoved, l.JobID)
		}
	}
	for _, id := range out.accepted {
		assert.True(t, expired[id], id)
		r := e.do(t, "GET", "/v1/videos/"+id+"/content", "", nil)
		assert.Equal(t, 404, r.status, id)
		assert.Contains(t, r.apiErr(t)["message"], "expired", id)
	}
}
