package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
)

// The server under hostile clients: each bound the server sets itself (docs/API.md, "Bounds")
// against the attack it answers. Memory is the test process's own heap, sampled while the
// attack runs (the server runs in it); attack_test.go measures a launched mediaserve's RSS.

// startBounded is start behind the server's own http.Server (its deadlines and connection cap).
func startBounded(t testing.TB, cfg server.Config) *env {
	t.Helper()
	return startWith(t, cfg, true)
}

// heapPeak samples the heap in use every millisecond until stop is called, which returns the
// peak above the heap when it started.
func heapPeak() (stop func() uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	base, peak := m.HeapInuse, m.HeapInuse
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapInuse)
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-finished
		return peak - min(base, peak)
	}
}

// healthWithin checks /health answers within d.
func healthWithin(t *testing.T, e *env, d time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := c.Get(e.http.URL + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Less(t, time.Since(start), d, "/health")
}

// postRaw sends body (read once per request) and returns the status, or 0 when the server
// closed the connection before answering.
func postRaw(url, ct string, body io.Reader) (int, []byte) {
	req, err := http.NewRequest("POST", url, body)
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Content-Type", ct)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// Eight 31 MiB JSON bodies {"seed":[0,0,...]}: once decoded whole before their types were
// checked (8.4-8.6 GB); now a video body is at most 1 MiB and an array value is refused at its
// first byte.
func TestJSONArrayBodies(t *testing.T) {
	e := start(t, server.Config{})
	body := append([]byte(`{"model":"ref-t2v","prompt":"x","seed":[`), bytes.Repeat([]byte("0,"), 31<<19)...)
	body = append(body, "0]}"...)
	stop := heapPeak()
	var wg sync.WaitGroup
	statuses := make([]int, 8)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], _ = postRaw(e.http.URL+"/v1/videos", "application/json", bytes.NewReader(body))
		}()
	}
	wg.Wait()
	peak := stop()
	t.Logf("8 x %d MiB JSON arrays: heap peak +%d MiB, statuses %v", len(body)>>20, peak>>20, statuses)
	for _, s := range statuses {
		assert.Contains(t, []int{0, 400, 413}, s)
	}
	assert.Less(t, peak, uint64(64<<20))

	r := e.do(t, "POST", "/v1/videos", "application/json", strings.NewReader(`{"model":"ref-t2v","prompt":"x","seed":[`+strings.Repeat("0,", 1000)+`0]}`))
	assert.Equal(t, 400, r.status)
	assert.Contains(t, r.apiErr(t)["message"], "seed must be a string or a number, not an array")
}

// A multipart body of 570,278 parts was parsed whole before it was refused; now the 33rd text
// field ends it (and a video body is at most 1 MiB).
func TestMultipartParts(t *testing.T) {
	e := start(t, server.Config{})
	var b bytes.Buffer
	for i := range 570_278 {
		fmt.Fprintf(&b, "--zz\r\nContent-Disposition: form-data; name=\"f%d\"\r\n\r\nx\r\n", i)
	}
	b.WriteString("--zz--\r\n")
	start := time.Now()
	status, body := postRaw(e.http.URL+"/v1/videos", "multipart/form-data; boundary=zz", &b)
	t.Logf("%d parts: %d in %v", 570_278, status, time.Since(start))
	if status != 0 {
		assert.Equal(t, 400, status, "%s", body)
		assert.Contains(t, string(body), "more than 32 fields")
	}
	small := strings.Repeat("--zz\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nx\r\n", 1)
	var many strings.Builder
	for i := range 40 {
		many.WriteString(strings.ReplaceAll(small, `name="f"`, fmt.Sprintf(`name="f%d"`, i)))
	}
	many.WriteString("--zz--\r\n")
	r := e.do(t, "POST", "/v1/videos", "multipart/form-data; boundary=zz", strings.NewReader(many.String()))
	assert.Equal(t, 400, r.status)
	assert.Contains(t, r.apiErr(t)["message"], "more than 32 fields")
}

// Slow uploads that declare 32 MiB: a buffer of the declared length was reserved before any
// byte arrived (200 of them: 6.7 GB). Now nothing is sized from the declaration, and a body
// that falls behind MinUploadRate after the grace gets 408 and its connection is closed.
func TestSlowUploads(t *testing.T) {
	defer server.SetUploadGrace(300 * time.Millisecond)()
	e := startBounded(t, server.Config{MinUploadRate: 64 << 10})
	addr := e.http.Listener.Addr().String()
	stop := heapPeak()
	conns := make([]net.Conn, 100)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/images/edits HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=zz\r\nContent-Length: %d\r\n\r\n", 32<<20)
		fmt.Fprintf(c, "--zz\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\nContent-Type: image/png\r\n\r\n%s", strings.Repeat("a", 1000))
		conns[i] = c
	}
	healthWithin(t, e, 100*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	peak := stop()
	t.Logf("100 stalled uploads declaring 32 MiB: heap peak +%d MiB", peak>>20)
	assert.Less(t, peak, uint64(32<<20))
	for _, c := range conns {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		line, err := bufio.NewReader(c).ReadString('\n')
		require.NoError(t, err)
		assert.Contains(t, line, "408", "a stalled body times out")
	}
	var n int
	for _, l := range e.ledger.entries(t) {
		if l.Error != nil && l.Error.Code == "request_timeout" {
			n++
		}
	}
	assert.Equal(t, len(conns), n, "each timed-out request has its rejected line")

	// A real upload above the rate goes through, however long past the grace it takes.
	noise := image.NewRGBA(image.Rect(0, 0, 128, 128))
	r := rand.New(rand.NewPCG(1, 2))
	for i := range noise.Pix {
		noise.Pix[i] = byte(r.Uint32()) | 1 // incompressible (alpha too): about 64 KB of PNG
	}
	var ref bytes.Buffer
	require.NoError(t, png.Encode(&ref, noise))
	body, ct := multipartBody(t, map[string]string{"model": "ref-edit", "prompt": "invert the colours", "size": "auto"},
		part{"image", "ref.png", ref.Bytes()})
	b, err := io.ReadAll(body)
	require.NoError(t, err)
	start := time.Now()
	status, answer := postRaw(e.http.URL+"/v1/images/edits", ct, &paced{b: b, perRead: 4 << 10, every: 40 * time.Millisecond})
	t.Logf("a %d KB upload at about 100 KiB/s: %d after %v", len(b)>>10, status, time.Since(start).Round(time.Millisecond))
	assert.Equal(t, 200, status, "%s", answer)
	assert.Greater(t, time.Since(start), 300*time.Millisecond, "the upload outlasted the grace")
}

// paced is a body that gives perRead bytes a read, one read every every.
type paced struct {
	b       []byte
	perRead int
	every   time.Duration
}

func (p *paced) Read(b []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	time.Sleep(p.every)
	n := copy(b[:min(len(b), p.perRead)], p.b)
	p.b = p.b[n:]
	return n, nil
}

// Idle keep-alive connections are closed after IdleTimeout, and at MaxConns the oldest idle
// ones make room: /health still answers within 100 ms.
func TestIdleConnections(t *testing.T) {
	e := startBounded(t, server.Config{IdleTimeout: 300 * time.Millisecond, MaxConns: 20})
	addr := e.http.Listener.Addr().String()
	var conns []net.Conn
	for range 60 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		conns = append(conns, c)
		if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			continue // closed already: the cap at work
		}
	}
	healthWithin(t, e, 100*time.Millisecond)
	closed := 0
	for _, c := range conns {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(2*time.Second)))
		_, err := io.Copy(io.Discard, c) // the answer, if any, then EOF when the server closes
		if err == nil || errors.Is(err, syscall.ECONNRESET) {
			closed++
		}
	}
	assert.Equal(t, len(conns), closed, "every idle connection is closed by the server")
}

// Edits whose decode the budget cannot hold: refused by name (413 when it never could, 429
// while others hold it), and the budget given back when the job ends.
func TestDecodeBudget(t *testing.T) {
	gate := make(chan struct{})
	cp := fakeCheckpoint("fake-edit", spec.ImageEdit)
	seen := make(chan bool, 8)
	task := &fakeTask{gate: gate, seen: func(r spec.Request) { seen <- r.Reference != nil }}
	e := start(t, server.Config{Models: []server.Model{{Checkpoint: cp, Task: task}}, MemoryBudget: 40 << 20})
	bomb, err := os.ReadFile("testdata/bomb-4096-progressive-cmyk.jpg")
	require.NoError(t, err)
	cmyk, err := os.ReadFile("testdata/progressive-cmyk-1024.jpg") // decode cost about 28 MiB
	require.NoError(t, err)
	edit := func(img []byte) response {
		return e.postForm(t, "/v1/images/edits", map[string]string{"model": "fake-edit", "prompt": "p", "size": "64x48"}, part{"image", "a.jpg", img})
	}

	r := edit(bomb)
	require.Equal(t, 413, r.status, "%s", r.body)
	assert.Equal(t, "image_too_large", r.apiErr(t)["code"])
	assert.Equal(t, "image", r.apiErr(t)["param"])

	first := make(chan response, 1)
	go func() { first <- edit(cmyk) }()
	require.True(t, <-seen, "the running job's reference is decoded")
	r = edit(cmyk)
	require.Equal(t, 429, r.status, "%s", r.body)
	assert.Equal(t, "over_memory_budget", r.apiErr(t)["code"])
	assert.NotEmpty(t, r.header.Get("Retry-After"))
	close(gate)
	r = <-first
	assert.Equal(t, 200, r.status, "%s", r.body)
	assert.Equal(t, 200, edit(cmyk).status, "the budget was given back")
}

// failingDisk is a ledger file on a disk that fills: while full, a write stores part of its
// line and fails; Truncate works, as a file's does.
type failingDisk struct {
	mu   sync.Mutex
	buf  []byte
	full bool
}

func (d *failingDisk) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.full {
		n := len(p) / 2
		d.buf = append(d.buf, p[:n]...)
		return n, syscall.ENOSPC
	}
	d.buf = append(d.buf, p...)
	return len(p), nil
}

func (d *failingDisk) Truncate(n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.buf = d.buf[:n]
	return nil
}

func (d *failingDisk) setFull(full bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.full = full
}

// entries parses the lines on the disk, each of which must be whole.
func (d *failingDisk) entries(t *testing.T) []server.LedgerEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.buf) == 0 {
		return nil
	}
	require.Equal(t, byte('\n'), d.buf[len(d.buf)-1], "a partial line is left: %q", d.buf)
	var out []server.LedgerEntry
	for _, l := range strings.Split(strings.TrimSuffix(string(d.buf), "\n"), "\n") {
		var e server.LedgerEntry
		require.NoError(t, json.Unmarshal([]byte(l), &e), "a whole line: %.80s", l)
		out = append(out, e)
	}
	return out
}

// While the ledger cannot write (a full disk), no new job is accepted (503 ledger_unwritable,
// with Retry-After; /health says why, /ready answers the same 503), the terminal lines of the
// jobs accepted before wait in memory, and once the disk has room they are written, unasked,
// in order and each once, with no partial line left. Before, the ledger went on accepting jobs
// and the lines of those that ended meanwhile were lost for good (and before that,
// json.Encoder kept its first error: no line at all followed).
func TestLedgerSurvivesAFullDisk(t *testing.T) {
	disk := &failingDisk{}
	gate := make(chan struct{})
	e := start(t, server.Config{Ledger: disk, Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: &fakeTask{gate: gate}}}})
	bad := map[string]string{"model": "fake", "prompt": "x", "fps": "30"}
	job := map[string]string{"model": "fake", "prompt": "accepted before the disk filled"}

	for range 2 {
		assert.Equal(t, 400, e.postForm(t, "/v1/videos", bad).status)
	}
	var ids []string
	for range 2 { // one runs, one waits in the queue
		ids = append(ids, e.postForm(t, "/v1/videos", job).json(t)["id"].(string))
	}
	disk.setFull(true)
	for range 3 {
		assert.Equal(t, 400, e.postForm(t, "/v1/videos", bad).status) // the first line fails: the ledger is down
	}
	r := e.postForm(t, "/v1/videos", job)
	require.Equal(t, 503, r.status, "%s", r.body)
	assert.Equal(t, "ledger_unwritable", r.apiErr(t)["code"])
	assert.Contains(t, r.apiErr(t)["message"], "no space left on device")
	assert.Equal(t, "1", r.header.Get("Retry-After"))
	health := e.do(t, "GET", "/health", "", nil)
	assert.Equal(t, 200, health.status, "the process serves: a restart would lose the waiting lines")
	assert.Equal(t, "degraded", health.json(t)["status"])
	assert.Equal(t, "ledger_unwritable", health.json(t)["reason"].(map[string]any)["code"])
	assert.Equal(t, 503, e.do(t, "GET", "/ready", "", nil).status)
	close(gate)
	for _, id := range ids {
		assert.Equal(t, "completed", e.waitVideo(t, id)["status"], "ended while the disk was full")
	}

	disk.setFull(false)
	require.Eventually(t, func() bool { return len(disk.entries(t)) == 2+1+2 }, 3*time.Second, 10*time.Millisecond,
		"the waiting lines are written once the disk has room, with no request to prompt it")
	assert.Equal(t, "ok", e.do(t, "GET", "/health", "", nil).json(t)["status"])
	assert.Equal(t, 200, e.do(t, "GET", "/ready", "", nil).status)
	after := e.postForm(t, "/v1/videos", job).json(t)["id"].(string)
	assert.Equal(t, "completed", e.waitVideo(t, after)["status"])

	var got []string
	lines := disk.entries(t)
	for i, l := range lines {
		got = append(got, l.Event+" "+l.JobID)
		if i > 0 {
			assert.False(t, l.Time.Before(lines[i-1].Time), "in order: %v", got)
		}
	}
	assert.Equal(t, []string{"rejected ", "rejected ", "rejected ", "job " + ids[0], "job " + ids[1], "job " + after}, got,
		"the lines before the disk filled, the first that failed (the two refusals after it are not written), each job's once")
}

// A ledger down until the server closes: past the bound on waiting lines (SetLedgerWaiting) the
// lines of accepted jobs are lost, and Close says how many lines were never written.
func TestLedgerDownAtClose(t *testing.T) {
	defer server.SetLedgerWaiting(1)() // the first line that fails always waits; no other fits
	disk := &failingDisk{}
	gate := make(chan struct{})
	e := start(t, server.Config{Ledger: disk, Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: &fakeTask{gate: gate}}}})
	var ids []string
	for range 3 {
		ids = append(ids, e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "p"}).json(t)["id"].(string))
	}
	disk.setFull(true)
	close(gate)
	for _, id := range ids {
		assert.Equal(t, "completed", e.waitVideo(t, id)["status"])
	}
	assert.Equal(t, 503, e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "p"}).status)
	err := e.srv.Close()
	require.Error(t, err)
	assert.Equal(t, "ledger: 4 lines could not be written (no space left on device), 3 of them owed to accepted jobs (terminal, delete or expiry lines)", err.Error())
	assert.Empty(t, disk.entries(t), "nothing was written")
}

// What the ledger quotes of bad input is bounded, headers it records are validated, and past
// MaxLedgerBytes refusals stop being written and new jobs are refused (507 ledger_full), while
// accepted jobs keep their lines.
func TestLedgerBounds(t *testing.T) {
	e := start(t, server.Config{MaxLedgerBytes: 16 << 10})
	huge := strings.Repeat("k", 900<<10)
	r := e.do(t, "POST", "/v1/videos", "application/json", strings.NewReader(`{"model":"ref-t2v","prompt":"x","`+huge+`":1}`),
		"X-Correlation-ID", strings.Repeat("c", 10<<10))
	assert.Equal(t, 400, r.status)
	assert.Less(t, len(r.body), 2<<10, "the answer quotes an excerpt")
	r = e.do(t, "POST", "/v1/videos", "application/json", strings.NewReader(`{"model":"ref-t2v","prompt":"x","size":"`+strings.Repeat("9", 60<<10)+`"}`),
		"X-Correlation-ID", "bad id with spaces")
	assert.Equal(t, 400, r.status)
	assert.Less(t, len(r.body), 2<<10, "the answer quotes an excerpt")
	for _, l := range e.ledger.entries(t) {
		assert.Empty(t, l.CorrelationID, "an unusable X-Correlation-ID is not recorded")
	}
	assert.Less(t, len(e.ledger.Bytes()), 4<<10, "two refusals of megabytes of input take two short lines")

	job := map[string]string{"model": "ref-t2v", "prompt": "p", "size": "160x96", "num_frames": "5", "num_inference_steps": "1"}
	id := e.postForm(t, "/v1/videos", job).json(t)["id"].(string)
	for len(e.ledger.Bytes()) < 16<<10 {
		e.postForm(t, "/v1/videos", map[string]string{"model": "ref-t2v", "prompt": "x", "fps": "30"})
	}
	assert.Equal(t, "completed", e.waitVideo(t, id)["status"])
	size := len(e.ledger.Bytes())
	r = e.postForm(t, "/v1/videos", job)
	require.Equal(t, 507, r.status, "%s", r.body)
	assert.Equal(t, "ledger_full", r.apiErr(t)["code"])
	assert.Equal(t, size, len(e.ledger.Bytes()), "refusals are no longer written")
	var done bool
	for _, l := range e.ledger.entries(t) {
		done = done || (l.JobID == id && l.Event == "job" && l.Status == "completed")
	}
	assert.True(t, done, "the accepted job's line is written")
}

// Caps on retained jobs and artifact bytes refuse new jobs by name; deleting makes room.
func TestStoreCaps(t *testing.T) {
	job := map[string]string{"model": "ref-t2v", "prompt": "p", "size": "160x96", "num_frames": "5", "num_inference_steps": "1"}
	e := start(t, server.Config{MaxJobs: 2})
	var ids []string
	for range 2 {
		ids = append(ids, e.postForm(t, "/v1/videos", job).json(t)["id"].(string))
	}
	r := e.postForm(t, "/v1/videos", job)
	require.Equal(t, 429, r.status, "%s", r.body)
	assert.Equal(t, "too_many_jobs", r.apiErr(t)["code"])
	assert.NotEmpty(t, r.header.Get("Retry-After"))
	e.waitVideo(t, ids[0])
	require.Equal(t, 200, e.do(t, "DELETE", "/v1/videos/"+ids[0], "", nil).status)
	assert.Equal(t, 200, e.postForm(t, "/v1/videos", job).status, "a deleted job makes room")

	e = start(t, server.Config{MaxArtifactBytes: 1})
	id := e.postForm(t, "/v1/videos", job).json(t)["id"].(string)
	e.waitVideo(t, id)
	r = e.postForm(t, "/v1/videos", job)
	require.Equal(t, 507, r.status, "%s", r.body)
	assert.Equal(t, "artifact_storage_full", r.apiErr(t)["code"])
	require.Equal(t, 200, e.do(t, "DELETE", "/v1/videos/"+id, "", nil).status)
	assert.Equal(t, 200, e.postForm(t, "/v1/videos", job).status, "a deleted artifact makes room")
}

// A Task that stops answering fails its job by name at its deadline (it kept its job
// in_progress and filled the queue until a DELETE); the lane goes on.
func TestJobDeadline(t *testing.T) {
	cp := fakeCheckpoint("fake-t2v", spec.TextToVideo)
	var calls atomic.Int32
	hang := &fakeTask{seen: func(spec.Request) { calls.Add(1) }, gate: make(chan struct{})}
	e := start(t, server.Config{Models: []server.Model{{Checkpoint: cp, Task: hang}}, JobTimeout: 200 * time.Millisecond})
	id := e.postForm(t, "/v1/videos", map[string]string{"model": "fake-t2v", "prompt": "p"}).json(t)["id"].(string)
	// Twice the default steps: twice the time.
	id2 := e.postForm(t, "/v1/videos", map[string]string{"model": "fake-t2v", "prompt": "p", "num_inference_steps": "4"}).json(t)["id"].(string)
	for i, id := range []string{id, id2} {
		v := e.waitVideo(t, id)
		require.Equal(t, "failed", v["status"])
		jerr := v["error"].(map[string]any)
		assert.Equal(t, "job_timeout", jerr["code"])
		assert.Contains(t, jerr["message"], fmt.Sprintf("within %s", []string{"200ms", "400ms"}[i]))
	}
	assert.Equal(t, int32(2), calls.Load())
}

// 401s are ledgered, at most 10 a second, each saying how many went unwritten before it; URLs
// come from PublicURL, never from Host.
func TestAuthAndPublicURL(t *testing.T) {
	e := start(t, server.Config{APIKey: "k", PublicURL: "https://media.example:8443/"})
	for range 30 {
		assert.Equal(t, 401, e.do(t, "GET", "/v1/models", "", nil, "Authorization", "Bearer wrong").status)
	}
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	assert.Equal(t, 401, e.do(t, "GET", "/v1/models", "", nil).status)
	var lines, suppressed int
	for _, l := range e.ledger.entries(t) {
		if l.HTTPStatus == 401 {
			lines++
			suppressed += l.Suppressed
		}
	}
	assert.LessOrEqual(t, lines, 21, "at most 10 a second")
	assert.Equal(t, 31, lines+suppressed, "every refusal written or counted")

	body, ct := multipartBody(t, map[string]string{"model": "ref-t2v", "prompt": "p", "size": "160x96", "num_frames": "5", "num_inference_steps": "1"})
	req, err := http.NewRequest("POST", e.http.URL+"/v1/videos", body)
	require.NoError(t, err)
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Authorization", "Bearer k")
	req.Host = "evil.example"
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	list := e.do(t, "GET", "/v1/videos", "", nil, "Authorization", "Bearer k").json(t)["data"].([]any)
	id := list[0].(map[string]any)["id"].(string)
	var v map[string]any
	require.Eventually(t, func() bool {
		v = e.do(t, "GET", "/v1/videos/"+id, "", nil, "Authorization", "Bearer k").json(t)
		return v["status"] == "completed"
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "https://media.example:8443/v1/videos/"+id+"/content", v["url"])

	_, err = server.New(server.Config{Models: referenceModels(t), ArtifactDir: t.TempDir(), PublicURL: "media.example:8443"})
	assert.ErrorContains(t, err, "not an http:// or https:// URL")

	// Without PublicURL: the address the connection reached, still not Host.
	e = start(t, server.Config{})
	body, ct = multipartBody(t, map[string]string{"model": "ref-t2v", "prompt": "p", "size": "160x96", "num_frames": "5", "num_inference_steps": "1"})
	req, err = http.NewRequest("POST", e.http.URL+"/v1/videos", body)
	require.NoError(t, err)
	req.Header.Set("Content-Type", ct)
	req.Host = "evil.example"
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	id = e.do(t, "GET", "/v1/videos", "", nil).json(t)["data"].([]any)[0].(map[string]any)["id"].(string)
	assert.Equal(t, e.http.URL+"/v1/videos/"+id+"/content", e.waitVideo(t, id)["url"])
}

// negative_prompt is bounded like prompt (30 MiB were accepted, answered in every poll and
// sent to the worker in one line).
func TestNegativePromptBounded(t *testing.T) {
	e := start(t, server.Config{})
	r := e.postJSON(t, "/v1/videos", map[string]string{"model": "ref-t2v", "prompt": "p", "negative_prompt": strings.Repeat("n", 32001)})
	require.Equal(t, 400, r.status)
	assert.Equal(t, "negative_prompt", r.apiErr(t)["param"])
	assert.Contains(t, r.apiErr(t)["message"], "at most 32000")
	r = e.postJSON(t, "/v1/videos", map[string]string{"model": "ref-t2v", "prompt": "p", "negative_prompt": strings.Repeat("n", 30<<20)})
	assert.Equal(t, 413, r.status)
}
