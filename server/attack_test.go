package server_test

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/server"
)

// TestAttacksOnMediaserve runs hostile clients' attacks, each on a fresh mediaserve process
// serving ref-edit and ref-t2v with its default flags unless the attack names others, asserts
// the answer to every request the attack sends, and measures what it cost the server: its
// peak RSS (VmHWM, from /proc), the slowest /health answer while the attack ran (one every 20
// ms on a new connection), and its open files after. MEDIASERVE_ATTACK_BIN runs them on
// another binary instead of this tree's; MEDIASERVE_STALL (a duration, default 2s) is how
// long the stalled uploads last, and MEDIASERVE_STALL_AT_ONCE=1 sends a refused one again at
// once instead of after its Retry-After (docs/PERFORMANCE.md, "Hostile clients", has the
// figures).
func TestAttacksOnMediaserve(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc")
	}
	bin := os.Getenv("MEDIASERVE_ATTACK_BIN")
	if bin == "" {
		bin = buildMediaserve(t)
	}
	stallFor, atOnce := 2*time.Second, os.Getenv("MEDIASERVE_STALL_AT_ONCE") == "1"
	if v := os.Getenv("MEDIASERVE_STALL"); v != "" {
		var err error
		stallFor, err = time.ParseDuration(v)
		require.NoError(t, err, "MEDIASERVE_STALL")
	}
	bomb, err := os.ReadFile("testdata/bomb-4096-progressive-cmyk.jpg")
	require.NoError(t, err)
	png16 := png16Bomb(t, 4096)
	edit := func(img []byte) (io.Reader, string) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		for k, v := range map[string]string{"model": "ref-edit", "prompt": "invert the colours", "size": "256x256"} {
			_ = mw.WriteField(k, v)
		}
		w, _ := mw.CreateFormFile("image", "ref")
		_, _ = w.Write(img)
		_ = mw.Close()
		return &b, mw.FormDataContentType()
	}
	seeds := append([]byte(`{"model":"ref-t2v","prompt":"x","seed":[`), bytes.Repeat([]byte("0,"), 31<<19)...)
	seeds = append(seeds, "0]}"...)
	// A bomb's decode fits the budget once (the JPEG's data is cut short: 400), or is refused.
	decodedOrBusy := func(a answer) bool {
		return a.status == 200 || a.is(400, "invalid_request") || a.is(429, "over_memory_budget")
	}
	oneDecoded := func(t *testing.T, out []answer) {
		assert.Less(t, tally(out)["429 over_memory_budget (Retry-After 1)"], len(out), "one decode fits the budget")
	}

	for _, a := range []struct {
		name    string
		flags   []string      // mediaserve's, beyond the two -model
		slowest time.Duration // the slowest /health allowed while it runs
		run     func(t *testing.T, url string) []answer
		allow   func(answer) bool // what every answer must be
	}{
		{"17 progressive CMYK JPEG bombs (164 bytes, 4096x4096)", nil, 100 * time.Millisecond, func(t *testing.T, url string) []answer {
			out := concurrently(17, func(int) answer { b, ct := edit(bomb); return send(url+"/v1/images/edits", ct, b) })
			oneDecoded(t, out)
			return out
		}, decodedOrBusy},
		{fmt.Sprintf("17 16-bit PNGs (%d KB, 4096x4096)", len(png16)>>10), nil, 100 * time.Millisecond, func(t *testing.T, url string) []answer {
			out := concurrently(17, func(int) answer { b, ct := edit(png16); return send(url+"/v1/images/edits", ct, b) })
			oneDecoded(t, out)
			return out
		}, decodedOrBusy},
		{"8 JSON bodies of 31 MiB {seed:[0,0,...]}", nil, 100 * time.Millisecond, func(t *testing.T, url string) []answer {
			return concurrently(8, func(int) answer { return send(url+"/v1/videos", "application/json", bytes.NewReader(seeds)) })
		}, func(a answer) bool { return a.is(400, "invalid_request") }},
		{"32 stalled uploads declaring 32 MiB at -max-conns 16", []string{"-max-conns", "16"}, time.Second, func(t *testing.T, url string) []answer {
			return stall(t, url, 32, 16, stallFor, atOnce)
		}, stalledOrRefused},
		{"600 stalled uploads declaring 32 MiB at the default -max-conns (512)", nil, time.Second, func(t *testing.T, url string) []answer {
			return stall(t, url, 600, 512, stallFor, atOnce)
		}, stalledOrRefused},
		{"1000 idle keep-alive connections after /health", nil, 100 * time.Millisecond, func(t *testing.T, url string) []answer {
			var conns []net.Conn
			for range 1000 {
				c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
				if err != nil {
					break
				}
				conns = append(conns, c)
				_, _ = io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
			}
			time.Sleep(time.Second)
			fds := openFiles(t, url)
			t.Logf("open files after: %d", fds)
			assert.Less(t, fds, 600, "open files: at most -max-conns (512) connections")
			var out []answer
			for _, c := range conns {
				_ = c.SetReadDeadline(time.Now().Add(time.Second))
				out = append(out, answerOf(http.ReadResponse(bufio.NewReader(c), nil)))
				c.Close()
			}
			return out
		}, func(a answer) bool { return a.status == 200 || a.status == 0 }},
	} {
		t.Run(a.name, func(t *testing.T) {
			// The prober shares this machine's cores with the attacker (and, in make test, with
			// other packages' tests): a /health slower than allowed, or failed, is measured once
			// more on a fresh server before it fails the test; both are logged.
			var hwm int64
			var slowest time.Duration
			var fails, probes int
			var firstFail string
			for try := 1; try <= 2; try++ {
				dir := t.TempDir()
				flags := append([]string{"-model", "ref-edit", "-model", "ref-t2v"}, a.flags...)
				cmd, e := startMediaserve(t, bin, filepath.Join(dir, "art"), filepath.Join(dir, "ledger.jsonl"), flags...)
				pids.Store(e.http.URL, cmd.Process.Pid)
				worst, failed, stop := watchHealth(e.http.URL)
				start := time.Now()
				out := a.run(t, e.http.URL)
				took := time.Since(start)
				stop()
				hwm, slowest = peakRSS(t, cmd.Process.Pid), worst()
				fails, probes, firstFail = failed()
				t.Logf("%s (try %d): peak RSS %d MiB, slowest /health %v (%d of %d failed%s), attack %v; answers %v",
					a.name, try, hwm>>20, slowest, fails, probes, cond(fails > 0, ", the first "+firstFail), took.Round(10*time.Millisecond), tally(out))
				for _, o := range out {
					if !a.allow(o) {
						t.Errorf("answer %v is not one this attack may get", o)
						break
					}
				}
				if slowest < a.slowest && fails == 0 {
					break
				}
			}
			assert.Less(t, hwm, int64(1500e6), "peak RSS under 1.5 GB")
			assert.Zero(t, fails, "/health always answered (the first failure: %s)", firstFail)
			assert.Less(t, slowest, a.slowest, "/health within %v", a.slowest)
		})
	}
}

// TestLedgerOutageOnMediaserve drives a launched mediaserve through a ledger that cannot write.
// The outage: -ledger is a FIFO whose reader goes away, so that every write fails (EPIPE), and
// comes back; the ledger takes any failed write for a full disk (TestLedgerSurvivesAFullDisk
// shows it with ENOSPC and partial writes, in process). The exit: -ledger /dev/full, where
// every write fails with ENOSPC.
func TestLedgerOutageOnMediaserve(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	bin := os.Getenv("MEDIASERVE_ATTACK_BIN")
	if bin == "" {
		bin = buildMediaserve(t)
	}
	small := map[string]string{"model": "ref-t2v", "prompt": "a small one", "size": "160x96", "num_frames": "5", "num_inference_steps": "1"}
	refused := func(t *testing.T, r response) {
		t.Helper()
		require.Equal(t, 503, r.status, "%s", r.body)
		assert.Equal(t, "ledger_unwritable", r.apiErr(t)["code"])
		assert.Equal(t, "1", r.header.Get("Retry-After"))
	}

	t.Run("an accepted job through an outage", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "ledger")
		require.NoError(t, syscall.Mkfifo(path, 0o600))
		ledger := openFIFO(t, path) // before the server: its open for writing waits for a reader
		_, e := startMediaserve(t, bin, filepath.Join(dir, "art"), path)
		ledger.read()
		id := e.postForm(t, "/v1/videos", map[string]string{"model": "ref-t2v", "prompt": "a long one", "size": "480x272",
			"num_frames": "17", "num_inference_steps": "30"}).json(t)["id"].(string)

		ledger.close() // the outage
		assert.Equal(t, 400, e.postForm(t, "/v1/videos", map[string]string{"model": "ref-t2v", "prompt": "x", "fps": "30"}).status)
		assert.NotEqual(t, "completed", e.do(t, "GET", "/v1/videos/"+id, "", nil).json(t)["status"], "the job ends during the outage")
		refused(t, e.postForm(t, "/v1/videos", small))
		health := e.do(t, "GET", "/health", "", nil)
		assert.Equal(t, 200, health.status)
		assert.Equal(t, "ledger_unwritable", health.json(t)["reason"].(map[string]any)["code"], "/health says why")
		assert.Equal(t, "completed", e.waitVideo(t, id)["status"])

		ledger = openFIFO(t, path) // the disk has room again
		ledger.read()
		require.Eventually(t, func() bool { return len(ledger.lines()) == 2 }, 5*time.Second, 10*time.Millisecond, "the waiting lines are written")
		after := e.postForm(t, "/v1/videos", small).json(t)["id"].(string)
		assert.Equal(t, "completed", e.waitVideo(t, after)["status"])
		require.Eventually(t, func() bool { return len(ledger.lines()) == 3 }, 5*time.Second, 10*time.Millisecond)
		var got []string
		for _, l := range ledger.lines() {
			var le server.LedgerEntry
			require.NoError(t, json.Unmarshal([]byte(l), &le), "a whole line: %.80s", l)
			got = append(got, le.Event+" "+le.JobID+" "+le.Status)
		}
		assert.Equal(t, []string{"rejected  rejected", "job " + id + " completed", "job " + after + " completed"}, got,
			"the refusal whose line failed first, the job's terminal line once, then the next job's")
	})

	t.Run("an exit during an outage", func(t *testing.T) {
		dir := t.TempDir()
		cmd, e := startMediaserve(t, bin, filepath.Join(dir, "art"), "/dev/full")
		id := e.postForm(t, "/v1/videos", small).json(t)["id"].(string)
		assert.Equal(t, "completed", e.waitVideo(t, id)["status"])
		// The job's status is completed before its terminal line is written: the outage is
		// known once that write has failed, which /health says.
		require.Eventually(t, func() bool {
			reason, _ := e.do(t, "GET", "/health", "", nil).json(t)["reason"].(map[string]any)
			return reason["code"] == "ledger_unwritable"
		}, 5*time.Second, 10*time.Millisecond, "the failed write of the job's terminal line")
		refused(t, e.postForm(t, "/v1/videos", small))
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		var exit *exec.ExitError
		require.ErrorAs(t, cmd.Wait(), &exit)
		assert.Equal(t, 1, exit.ExitCode())
		assert.Contains(t, cmd.Stderr.(*syncBuffer).String(), "mediaserve: ledger: 2 lines could not be written (no space left on device), "+
			"1 of them owed to accepted jobs (terminal, delete or expiry lines)\n")
	})
}

// fifoReader reads the lines a FIFO's writer sends while it is open.
type fifoReader struct {
	f    *os.File
	mu   sync.Mutex
	buf  []byte
	done chan struct{}
}

func openFIFO(t *testing.T, path string) *fifoReader {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	require.NoError(t, err)
	r := &fifoReader{f: f, done: make(chan struct{})}
	t.Cleanup(r.close)
	return r
}

// read starts reading, once a writer has the FIFO open (without one, a read ends at once).
func (r *fifoReader) read() {
	go func() {
		defer close(r.done)
		b := make([]byte, 64<<10)
		for {
			n, err := r.f.Read(b)
			r.mu.Lock()
			r.buf = append(r.buf, b[:n]...)
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
}

// close ends reading: the writer's writes fail from now on.
func (r *fifoReader) close() {
	if r.f.Close() == nil {
		<-r.done
	}
}

// lines are the whole lines read so far.
func (r *fifoReader) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := bytes.LastIndexByte(r.buf, '\n'); i >= 0 {
		return strings.Split(string(r.buf[:i]), "\n")
	}
	return nil
}

// stall keeps n multipart uploads declaring 32 MiB open on url, the server's -max-conns being
// maxConns, for d, each sending its first bytes at once and then just above MinUploadRate
// (64 KiB/s) from a second before its grace (10 s) ends, as slowly as the server allows; one
// the server answers or closes is sent again after its Retry-After (1 s without one), within
// half of it either way at random so that they do not all come at once, or at once if atOnce. Meanwhile a small create is sent
// every 250 ms. It returns every answer: the uploads', then the creates'. At most a quarter of
// maxConns uploads may be held at the end (one client address's share).
func stall(t *testing.T, url string, n, maxConns int, d time.Duration, atOnce bool) []answer {
	const rate, grace, declared = 64 << 10, 10 * time.Second, 32 << 20
	addr := strings.TrimPrefix(url, "http://")
	end := time.Now().Add(d)
	var mu sync.Mutex
	var uploads, creates []answer
	held := 0
	upload := func() (retry time.Duration) {
		retry = time.Second
		c, err := net.Dial("tcp", addr)
		if err != nil {
			mu.Lock()
			uploads = append(uploads, answer{req: "upload (dial failed)"})
			mu.Unlock()
			return retry
		}
		defer c.Close()
		answered := make(chan answer, 1)
		go func() {
			a := answerOf(http.ReadResponse(bufio.NewReader(c), nil))
			a.req = "upload"
			answered <- a
		}()
		start := time.Now()
		fmt.Fprintf(c, "POST /v1/images/edits HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=zz\r\nContent-Length: %d\r\n\r\n"+
			"--zz\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a\"\r\n\r\nab", declared)
		sent := 0
		for {
			select {
			case a := <-answered:
				mu.Lock()
				uploads = append(uploads, a)
				mu.Unlock()
				if s, err := strconv.Atoi(a.retryAfter); err == nil {
					retry = time.Duration(s) * time.Second
				}
				return retry
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(end.Add(time.Second)) { // a refusal's answer may take half a second
				mu.Lock()
				held++
				mu.Unlock()
				return 0
			}
			// The server wants each next 32 KiB by grace + bytes/rate from the start.
			if late := time.Since(start) - grace + time.Second; late > 0 {
				want := 32<<10 + int(1.1*rate*late.Seconds())
				if want > sent {
					k, _ := c.Write(bytes.Repeat([]byte("a"), want-sent))
					sent += k
				}
			}
		}
	}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if retry := upload(); !atOnce {
					time.Sleep(min(time.Until(end), retry/2+time.Duration(rand.Int64N(int64(retry)+1))))
				}
			}
		}()
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for time.Now().Before(end) {
		time.Sleep(250 * time.Millisecond)
		req, _ := http.NewRequest("POST", url+"/v1/videos", strings.NewReader(
			`{"model":"ref-t2v","prompt":"a small one","size":"160x96","num_frames":5,"num_inference_steps":1}`))
		req.Header.Set("Content-Type", "application/json")
		a := answerOf(client.Do(req))
		a.req = "create"
		creates = append(creates, a)
	}
	wg.Wait()
	t.Logf("%d uploads held at the end; creates: %v", held, tally(creates))
	assert.LessOrEqual(t, held, maxConns/4, "uploads one address holds")
	return append(uploads, creates...)
}

// stalledOrRefused: an upload is refused by name (too many uploads, or the memory budget,
// with Retry-After) or closed unanswered (the connection guard made room); a create is
// answered 200 or refused by name with Retry-After.
func stalledOrRefused(a answer) bool {
	if a.req == "create" {
		return a.status == 200 || a.is(429, a.code) || a.is(503, a.code)
	}
	return a.req == "upload" && (a.status == 0 || a.is(429, "too_many_uploads") || a.is(429, "over_memory_budget"))
}

// answer is what the server said to one request: its status (0: the connection closed or
// timed out before one), error code and Retry-After, if any; req says what was sent.
type answer struct {
	req        string
	status     int
	code       string
	retryAfter string
}

func (a answer) String() string {
	s := strconv.Itoa(a.status)
	if a.req != "" {
		s = a.req + " " + s
	}
	if a.code != "" {
		s += " " + a.code
	}
	if a.retryAfter != "" {
		s += " (Retry-After " + a.retryAfter + ")"
	}
	return s
}

// is says whether a is status with code; a 429 or a 503 must also say when to retry.
func (a answer) is(status int, code string) bool {
	return a.status == status && a.code == code && code != "" &&
		(a.retryAfter != "" || status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable)
}

// answerOf reads resp's status, error code and Retry-After, and closes it.
func answerOf(resp *http.Response, err error) answer {
	if err != nil {
		return answer{}
	}
	defer resp.Body.Close()
	var body struct{ Error struct{ Code string } }
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body)
	return answer{status: resp.StatusCode, code: body.Error.Code, retryAfter: resp.Header.Get("Retry-After")}
}

// send posts body and returns the answer.
func send(url, ct string, body io.Reader) answer {
	req, err := http.NewRequest("POST", url, body)
	if err != nil {
		return answer{}
	}
	req.Header.Set("Content-Type", ct)
	return answerOf(http.DefaultClient.Do(req))
}

// tally counts answers alike.
func tally(as []answer) map[string]int {
	out := map[string]int{}
	for _, a := range as {
		out[a.String()]++
	}
	return out
}

var pids sync.Map // base URL -> mediaserve pid

// openFiles counts the open files of the mediaserve at url.
func openFiles(t *testing.T, url string) int {
	pid, _ := pids.Load(url)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	require.NoError(t, err)
	return len(fds)
}

// peakRSS is pid's VmHWM in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// watchHealth asks url's /health every 20 ms on a new connection, from now until stop, which
// asks once more after the attack; failed says how many of how many probes failed, and the
// first failure. The probes come from 127.0.0.2, another client than the attacker's 127.0.0.1,
// as a health checker is: past -max-conns the server closes a waiting connection of the address
// that holds the most, which a probe from the attacker's own address could be.
func watchHealth(url string) (slowest func() time.Duration, failed func() (fails, probes int, first string), stop func()) {
	var mu sync.Mutex
	var worst time.Duration
	var fails, probes int
	var first string // the first failure, as it came
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: dialer.DialContext}}
	probe := func() {
		start := time.Now()
		resp, err := c.Get(url + "/health")
		d := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		probes++
		if err != nil || resp.StatusCode != 200 {
			fails++
			switch {
			case first != "":
			case err != nil:
				first = fmt.Sprintf("after %v: %v", d.Round(time.Millisecond), err)
			default:
				first = fmt.Sprintf("after %v: %s", d.Round(time.Millisecond), resp.Status)
			}
		}
		if err == nil {
			resp.Body.Close()
		}
		worst = max(worst, d)
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			probe()
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() time.Duration { mu.Lock(); defer mu.Unlock(); return worst },
		func() (int, int, string) { mu.Lock(); defer mu.Unlock(); return fails, probes, first },
		func() { close(done); <-finished; probe() }
}

// concurrently runs f n times at once and returns what each returned.
func concurrently[T any](n int, f func(i int) T) []T {
	out := make([]T, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = f(i) }()
	}
	wg.Wait()
	return out
}

// png16Bomb is a size x size 16-bit RGBA PNG of zeros, made a row at a time: about 130 KB that
// decode to size*size*8 bytes.
func png16Bomb(t *testing.T, size int) []byte {
	var out bytes.Buffer
	out.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		_ = binary.Write(&out, binary.BigEndian, uint32(len(data)))
		crc := crc32.NewIEEE()
		crc.Write([]byte(typ))
		crc.Write(data)
		out.WriteString(typ)
		out.Write(data)
		_ = binary.Write(&out, binary.BigEndian, crc.Sum32())
	}
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(size))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(size))
	ihdr[8], ihdr[9] = 16, 6 // 16 bits, RGBA
	chunk("IHDR", ihdr[:])
	var idat bytes.Buffer
	z, err := zlib.NewWriterLevel(&idat, zlib.BestCompression)
	require.NoError(t, err)
	row := make([]byte, 1+size*8)
	for range size {
		_, err := z.Write(row)
		require.NoError(t, err)
	}
	require.NoError(t, z.Close())
	chunk("IDAT", idat.Bytes())
	chunk("IEND", nil)
	return out.Bytes()
}

// cond is s when ok, else "".
func cond(ok bool, s string) string {
	if ok {
		return s
	}
	return ""
}
