package server_test

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAttacksOnMediaserve runs the attacks, each on a fresh mediaserve process with
// its default flags (ref-edit and ref-t2v), and measures what they cost it: its peak RSS
// (VmHWM, from /proc), the slowest /health answer while the attack ran (one every 20 ms on a
// new connection), and its open files after. MEDIASERVE_ATTACK_BIN runs them on another binary
// instead of this tree's (docs/PERFORMANCE.md, "Hostile clients", has both figures).
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

	for _, a := range []struct {
		name string
		run  func(t *testing.T, url string) []int
	}{
		{"17 progressive CMYK JPEG bombs (164 bytes, 4096x4096)", func(t *testing.T, url string) []int {
			return concurrently(17, func(int) int { b, ct := edit(bomb); return post(url+"/v1/images/edits", ct, b) })
		}},
		{fmt.Sprintf("17 16-bit PNGs (%d KB, 4096x4096)", len(png16)>>10), func(t *testing.T, url string) []int {
			return concurrently(17, func(int) int { b, ct := edit(png16); return post(url+"/v1/images/edits", ct, b) })
		}},
		{"8 JSON bodies of 31 MiB {seed:[0,0,...]}", func(t *testing.T, url string) []int {
			return concurrently(8, func(int) int { return post(url+"/v1/videos", "application/json", bytes.NewReader(seeds)) })
		}},
		{"100 stalled uploads declaring 32 MiB", func(t *testing.T, url string) []int {
			var conns []net.Conn
			for range 100 {
				c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
				require.NoError(t, err)
				conns = append(conns, c)
				fmt.Fprintf(c, "POST /v1/images/edits HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=zz\r\nContent-Length: %d\r\n\r\n--zz\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a\"\r\n\r\nab", 32<<20)
			}
			time.Sleep(time.Second)
			for _, c := range conns {
				c.Close()
			}
			return nil
		}},
		{"1000 idle keep-alive connections after /health", func(t *testing.T, url string) []int {
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
			for _, c := range conns {
				c.Close()
			}
			return []int{fds}
		}},
	} {
		t.Run(a.name, func(t *testing.T) {
			// The prober shares this machine's cores with the attacker (and, in make test, with
			// other packages' tests): a /health over 100 ms is measured once more on a fresh
			// server before it fails the test; both are logged.
			var hwm int64
			var slowest time.Duration
			var fails int
			var out []int
			for try := 1; try <= 2; try++ {
				dir := t.TempDir()
				cmd, e := startMediaserve(t, bin, filepath.Join(dir, "art"), filepath.Join(dir, "ledger.jsonl"), "ref-edit", "ref-t2v")
				pids.Store(e.http.URL, cmd.Process.Pid)
				worst, failed, stop := watchHealth(e.http.URL)
				start := time.Now()
				out = a.run(t, e.http.URL)
				took := time.Since(start)
				stop()
				hwm, slowest, fails = peakRSS(t, cmd.Process.Pid), worst(), failed()
				t.Logf("%s (try %d): peak RSS %d MiB, slowest /health %v (%d failed), attack %v; answers %v",
					a.name, try, hwm>>20, slowest, fails, took.Round(10*time.Millisecond), out)
				if slowest < 100*time.Millisecond {
					break
				}
			}
			assert.Less(t, hwm, int64(1500e6), "peak RSS under 1.5 GB")
			assert.Zero(t, fails, "/health always answered")
			assert.Less(t, slowest, 100*time.Millisecond, "/health within 100 ms")
			if strings.HasPrefix(a.name, "1000 idle") {
				assert.Less(t, out[0], 600, "open files: at most -max-conns (512) connections")
			}
		})
	}
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
// asks once more after the attack.
func watchHealth(url string) (slowest func() time.Duration, failed func() int, stop func()) {
	var mu sync.Mutex
	var worst time.Duration
	var fails int
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	probe := func() {
		start := time.Now()
		resp, err := c.Get(url + "/health")
		d := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		if err != nil || resp.StatusCode != 200 {
			fails++
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
		func() int { mu.Lock(); defer mu.Unlock(); return fails },
		func() { close(done); <-finished; probe() }
}

// concurrently runs f n times at once and returns what each returned.
func concurrently(n int, f func(i int) int) []int {
	out := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = f(i) }()
	}
	wg.Wait()
	return out
}

// post sends body and returns the status (0: the server closed the connection first).
func post(url, ct string, body io.Reader) int {
	status, _ := postRaw(url, ct, body)
	return status
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
