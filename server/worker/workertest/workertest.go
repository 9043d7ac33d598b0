// Package workertest makes a Go test binary act as a mediaserve worker (docs/WORKER.md), so
// that tests can run the out-of-process Task runtime (server/worker) end to end without a
// real model. It exists for tests only; nothing in production imports it.
//
// Use it from TestMain, before m.Run:
//
//	func TestMain(m *testing.M) {
//		workertest.Main() // exits when EnvMode is set: this process is then a worker
//		os.Exit(m.Run())
//	}
//
// and start workers with worker.Config{Argv: []string{os.Args[0]}, Env: []string{workertest.EnvMode + "=ok"}}.
//
// Modes:
//
//	ok        renders deterministic frames (Pattern) from size, num_frames and seed (or copies
//	          the reference); also prints a non-JSON line and a line for an unknown job
//	crash     like ok, but exits abruptly (status 3) mid-job when the prompt contains "crash",
//	          closes stdout but stays alive when it contains "hang up", and sends a 2 MiB
//	          progress line (over the protocol's 1 MiB) before finishing as ok when it
//	          contains "shout"
//	badbytes  writes 7 bytes too few
//	badresult sends a result line whose frames field is not a number
//	error     answers every job with an error event
//	slow      sleeps 20 ms per step and honours cancel between steps
//	stubborn  sleeps 20 ms per step and ignores cancel
//	fatal     sends a fatal line instead of ready
//	hang      never sends ready
//	once      like crash on its first start; every later start is fatal (EnvMarker)
//	orphan    like ok, after starting a child that sleeps (pid written to EnvMarker)
//	deaf      like ok, but does not exit when stdin closes
//	gated     like ok, but sends ready only once the file named by EnvMarker exists
//	parity    like ok, with Parity in its ready line
//	stream    like ok, but writes the frames a chunk at a time as Wan's VAE decodes them (1,
//	          then 4 a chunk) and announces each chunk but the last with a frames event; all
//	          of them when the prompt contains "announce all"
//	badframes sends the broken frames event (or, "result ...", the result inconsistent with
//	          its frames events) that the prompt names: one of BadFrames; then, if the job
//	          has not ended, waits for the server's cancel (exiting with status 4 if
//	          another job comes before it ended) and finishes the job as ok does
//
// Every mode reports precision Precision in its ready line and results, and, started with
// "--layout L" (as mediaserve starts the worker of a row with layouts), actual.layout L.
package workertest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image"
	_ "image/jpeg" // an uploaded reference may be JPEG
	_ "image/png"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

const (
	// EnvMode names the worker mode; when set, Main turns the process into a worker.
	EnvMode = "MEDIAQUAL_TEST_WORKER"
	// EnvMarker names a file some modes use (once, orphan, gated).
	EnvMarker = "MEDIAQUAL_TEST_MARKER"
	// Precision is what the test worker reports in its ready line and in actual.precision.
	Precision = "bf16"
)

// Main runs the process as a worker and exits when EnvMode is set; otherwise it returns at
// once. Call it first thing in TestMain.
func Main() {
	if mode := os.Getenv(EnvMode); mode != "" {
		os.Exit(Run(mode))
	}
}

type command struct {
	Op        string        `json:"op"`
	ID        string        `json:"id"`
	Settings  spec.Settings `json:"settings"`
	Reference string        `json:"reference"`
	Output    string        `json:"output"`
}

// BadFrames are the breakages of the frames rules (docs/WORKER.md) mode badframes sends, by
// the prompt that asks for each.
var BadFrames = []string{
	"malformed", "other job", "wrong size", "size changes", "not increasing", "zero frames",
	"beyond", "short file", "result fewer", "result resized", "result beyond",
}

// Pattern is the deterministic rgb24 content (channel c) of frame f at (x, y) for seed, as
// rendered by every mode for text_to_video jobs.
func Pattern(seed int64, f, x, y, c int) byte {
	return byte(seed*7 + int64(f*13+y*5+x*3+c*101))
}

func renderRaw(seed int64, frames, w, h int) []byte {
	b := make([]byte, 0, frames*w*h*3)
	for f := 0; f < frames; f++ {
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				for c := 0; c < 3; c++ {
					b = append(b, Pattern(seed, f, x, y, c))
				}
			}
		}
	}
	return b
}

// Parity is what the worker's ready line carries in mode "parity" (docs/WORKER.md).
var Parity = map[string]any{"reference": "eager, one device, before layout and engine",
	"served": "engine regional-compile, layout single", "rel_l2": 0.0125, "cond_rel_l2": 0.004, "max_abs": 0.07,
	"fp32_reference": 0.0542, "fp32_served": 0.0487, "bound": 0.1084, "ceiling": 0.15,
	"cond_fp32_reference": 0.0146, "cond_fp32_served": 0.0127, "cond_bound": 0.0292, "cond_ceiling": 0.06,
	"max_abs_fp32_reference": 0.05, "max_abs_fp32_served": 0.06, "max_abs_bound": 0.2,
	"bound_of": "to fp32, each prediction <= 2 x eager bf16's", "passed": true}

// Run speaks the worker protocol on stdin/stdout in mode (see the package comment) and returns
// the process's exit status.
func Run(mode string) int {
	enc := json.NewEncoder(os.Stdout) // one Write per line on unbuffered stdout
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	logf("test worker starting in mode %s", mode)

	switch mode {
	case "fatal":
		logf("loading weights")
		_ = enc.Encode(map[string]any{"event": "fatal", "message": "weights not found: /nonexistent/model.safetensors"})
		return 2
	case "hang":
		time.Sleep(time.Minute)
		return 0
	case "once":
		marker := os.Getenv(EnvMarker)
		if _, err := os.Stat(marker); err == nil {
			_ = enc.Encode(map[string]any{"event": "fatal", "message": "second start refused"})
			return 2
		}
		_ = os.WriteFile(marker, []byte("started"), 0o600)
		mode = "crash"
	case "orphan":
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), EnvMode+"=hang")
		if err := child.Start(); err != nil {
			logf("starting child: %v", err)
			return 1
		}
		_ = os.WriteFile(os.Getenv(EnvMarker), []byte(fmt.Sprint(child.Process.Pid)), 0o600)
		mode = "ok"
	case "gated":
		marker := os.Getenv(EnvMarker)
		logf("loading until %s exists", marker)
		for {
			if _, err := os.Stat(marker); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		mode = "ok"
	}

	ready := map[string]any{"event": "ready", "precision": Precision, "pid": os.Getpid()}
	if mode == "parity" {
		ready["parity"] = Parity
		mode = "ok"
	}
	_ = enc.Encode(ready)

	lines := make(chan command)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			var c command
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				logf("bad command line: %v", err)
				continue
			}
			lines <- c
		}
		close(lines)
	}()
	for c := range lines {
		if c.Op != "run" {
			continue // e.g. a cancel for a job that already ended
		}
		if !runJob(mode, c, lines, enc, logf) {
			break
		}
	}
	if mode == "deaf" {
		time.Sleep(time.Minute)
	}
	logf("stdin closed, exiting")
	return 0
}

// runJob runs one job; false means stdin closed during it.
func runJob(mode string, c command, lines <-chan command, enc *json.Encoder, logf func(string, ...any)) bool {
	start := time.Now()
	s := c.Settings
	w, h := s.Size.W, s.Size.H
	frames := max(s.NumFrames, 1)
	logf("job %s: %q %dx%d frames=%d steps=%d", c.ID, s.Prompt, w, h, frames, s.Steps)
	fail := func(code, msg, param string) bool {
		_ = enc.Encode(map[string]any{"event": "error", "id": c.ID, "code": code, "message": msg, "param": param})
		return true
	}

	var raw []byte
	if c.Reference != "" {
		f, err := os.Open(c.Reference)
		if err != nil {
			return fail("bad_reference", err.Error(), "")
		}
		img, _, err := image.Decode(f)
		f.Close()
		if err != nil { // as the Python workers report it (models/qwenimage)
			return fail("invalid_request", fmt.Sprintf("cannot read the reference %q: %v", c.Reference, err), "reference")
		}
		if img.Bounds().Dx() != w || img.Bounds().Dy() != h {
			return fail("bad_reference", fmt.Sprintf("reference is %v, size %v", img.Bounds(), s.Size), "")
		}
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				r, g, b, _ := img.At(x, y).RGBA()
				raw = append(raw, byte(r>>8), byte(g>>8), byte(b>>8))
			}
		}
	} else {
		raw = renderRaw(s.Seed, frames, w, h)
	}

	switch mode {
	case "error":
		return fail("out_of_memory", "CUDA out of memory (simulated)", "prompt")
	case "crash":
		if strings.Contains(s.Prompt, "hang up") {
			logf("closing stdout and staying alive")
			os.Stdout.Close()
			time.Sleep(time.Minute)
		}
		if strings.Contains(s.Prompt, "shout") {
			_ = enc.Encode(map[string]any{"event": "progress", "id": c.ID, "done": 0, "total": s.Steps, "note": strings.Repeat("a", 2<<20)})
		}
		if strings.Contains(s.Prompt, "crash") {
			_ = enc.Encode(map[string]any{"event": "progress", "id": c.ID, "done": 1, "total": s.Steps})
			logf("boom: simulated segfault in denoise step 1")
			os.Exit(3)
		}
	case "badresult":
		_ = os.WriteFile(c.Output, raw, 0o600)
		_ = enc.Encode(map[string]any{"event": "result", "id": c.ID, "frames": "seventeen", "width": w, "height": h})
		return true
	case "ok":
		fmt.Println("this line is not JSON")
		_ = enc.Encode(map[string]any{"event": "progress", "id": "no-such-job", "done": 1, "total": 1})
	}

	for i := 1; i <= s.Steps; i++ {
		if mode == "slow" || mode == "stubborn" {
			time.Sleep(20 * time.Millisecond)
		}
		if mode == "slow" {
			select {
			case c2, ok := <-lines:
				if !ok {
					return false
				}
				if c2.Op == "cancel" && c2.ID == c.ID {
					logf("job %s cancelled at step %d", c.ID, i)
					return fail("cancelled", "cancelled at step "+fmt.Sprint(i), "")
				}
			default:
			}
		}
		_ = enc.Encode(map[string]any{"event": "progress", "id": c.ID, "done": i, "total": s.Steps})
	}

	if mode == "badbytes" {
		raw = raw[:len(raw)-7]
	}
	if mode != "stream" && mode != "badframes" {
		if err := os.WriteFile(c.Output, raw, 0o600); err != nil {
			return fail("io", err.Error(), "")
		}
	} else if err := streamJob(mode, c, raw, enc, lines, logf, &frames, &w); err != nil {
		return fail("io", err.Error(), "")
	}
	actual := spec.Actual{
		Width: w, Height: h, Steps: s.Steps, Guidance: s.Guidance, Seed: s.Seed,
		FPS: s.FPS, NumFrames: s.NumFrames, Precision: Precision, Layout: argValue("--layout"),
	}
	if s.FPS > 0 {
		actual.DurationS = float64(s.NumFrames) / float64(s.FPS)
	}
	_ = enc.Encode(map[string]any{
		"event": "result", "id": c.ID, "frames": frames, "width": w, "height": h,
		"actual": actual, "task_wall_ms": float64(time.Since(start).Microseconds())/1000 + 1,
		"peak_memory_mb": 1234.5,
	})
	return true
}

// argValue is the value after flag among the process's arguments, "" without it.
func argValue(flag string) string {
	for i, a := range os.Args[1:] {
		if a == flag && i+2 < len(os.Args) {
			return os.Args[i+2]
		}
	}
	return ""
}

// streamJob writes the frames of modes stream and badframes append-only, as frames events
// require, sending the events the mode and prompt ask for. A "result ..." breakage changes
// the frame count or width the result then declares.
func streamJob(mode string, c command, raw []byte, enc *json.Encoder, lines <-chan command, logf func(string, ...any), frames, w *int) error {
	h, p := c.Settings.Size.H, c.Settings.Prompt
	fb := 3 * *w * h
	f, err := os.OpenFile(c.Output, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	written := 0
	write := func(n int) error { // up to the end of frame n
		_, err := f.Write(raw[written : n*fb])
		written = n * fb
		return err
	}
	announce := func(id string, n, w, h int) {
		_ = enc.Encode(map[string]any{"event": "frames", "id": id, "frames": n, "width": w, "height": h})
	}
	total := *frames
	switch {
	case mode == "stream":
		for n, chunk := 0, 1; n < total; n, chunk = n+chunk, 4 {
			chunk = min(chunk, total-n)
			if err := write(n + chunk); err != nil {
				return err
			}
			if n+chunk < total || strings.Contains(p, "announce all") {
				announce(c.ID, n+chunk, *w, h)
			}
		}
		return f.Close()
	case strings.HasPrefix(p, "result "):
		// The job ends with its result: nothing to cancel.
		_ = write(3)
		announce(c.ID, 3, *w, h)
		switch p {
		case "result fewer":
			*frames = 2
		case "result resized":
			*w += 2
		case "result beyond":
			*frames = total + 1
		}
		return f.Close()
	}

	short := false
	switch p {
	case "malformed":
		_ = enc.Encode(map[string]any{"event": "frames", "id": c.ID, "frames": "two", "width": *w, "height": h})
	case "other job":
		_ = write(1)
		announce("job-999", 1, *w, h)
	case "wrong size":
		_ = write(1)
		announce(c.ID, 1, *w+2, h)
	case "size changes":
		_ = write(2)
		announce(c.ID, 1, *w, h)
		announce(c.ID, 2, *w, h+2)
	case "not increasing":
		_ = write(2)
		announce(c.ID, 2, *w, h)
		announce(c.ID, 2, *w, h)
	case "zero frames":
		announce(c.ID, 0, *w, h)
	case "beyond":
		_ = write(total)
		announce(c.ID, total+1, *w, h)
	case "short file":
		_ = write(1)
		announce(c.ID, 2, *w, h)
		short = true // the rest would race the server's read
	default: // no breakage asked: frames as ok writes them
		if err := write(total); err != nil {
			return err
		}
		return f.Close()
	}
	// The server must cancel the job, and send no other before it ended (a run that comes
	// within 100 ms of the cancel would be one).
	for wait := 5 * time.Second; ; wait = 100 * time.Millisecond {
		select {
		case next, ok := <-lines:
			switch {
			case ok && next.Op == "cancel" && next.ID == c.ID:
				logf("job %s cancelled after its bad frames event; finishing it", c.ID)
				continue
			case ok:
				logf("protocol broken: %s %s while job %s runs", next.Op, next.ID, c.ID)
				os.Exit(4)
			}
		case <-time.After(wait):
		}
		break
	}
	if !short {
		if err := write(total); err != nil {
			return err
		}
	}
	return f.Close()
}
