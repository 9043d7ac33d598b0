//go:build linux

package launch

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// fakeEnv, when set, makes the test binary a fake server instead of running tests. Its value is
// the mode:
//
//	ok           /ready answers 503 for -ready-after (300 ms), then 200; SIGTERM exits 0
//	exit-early   prints a message and exits with status 3
//	never-ready  /ready always answers 503
//	ignore-term  like ok, but SIGTERM is ignored
//	grandchild   like ok, and spawns a sleeping child of its own (pid at /grandchild)
//	sleep        sleeps for an hour (the grandchild)
//
// The fake listens on 127.0.0.1:-port (0 picks one) and prints "fake listening on http://ADDR".
// /env?name=X answers the value of X in its environment.
const fakeEnv = "LAUNCH_FAKE_SERVER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeEnv); mode != "" {
		os.Exit(fakeServer(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeServer(mode string, args []string) int {
	fs := flag.NewFlagSet("fake", flag.ContinueOnError)
	port := fs.Int("port", 0, "")
	readyAfter := fs.Duration("ready-after", 300*time.Millisecond, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	start := time.Now()
	switch mode {
	case "sleep":
		time.Sleep(time.Hour)
		return 0
	case "exit-early":
		time.Sleep(50 * time.Millisecond)
		fmt.Fprintln(os.Stderr, "fake: cannot load weights: no such file")
		return 3
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
	default:
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() {
			<-term
			fmt.Fprintln(os.Stderr, "fake: SIGTERM, shutting down")
			os.Exit(0)
		}()
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		if mode == "never-ready" || time.Since(start) < *readyAfter {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /env", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, os.Getenv(r.URL.Query().Get("name")))
	})
	if mode == "grandchild" {
		gc := exec.Command(os.Args[0])
		gc.Env = append(os.Environ(), fakeEnv+"=sleep")
		gc.Stdout, gc.Stderr = os.Stdout, os.Stderr
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "fake: grandchild:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "fake: grandchild pid", gc.Process.Pid)
		mux.HandleFunc("GET /grandchild", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, gc.Process.Pid)
		})
	}

	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "fake: mode %s, CUDA_VISIBLE_DEVICES=%q\n", mode, os.Getenv("CUDA_VISIBLE_DEVICES"))
	if mode == "never-ready" {
		fmt.Fprintln(os.Stderr, "fake: never ready")
	}
	fmt.Printf("fake listening on http://%s (pid %d)\n", ln.Addr(), os.Getpid())
	err = http.Serve(ln, mux)
	fmt.Fprintln(os.Stderr, "fake:", err)
	return 1
}

// fakeConfig starts the test binary as a fake server in mode.
func fakeConfig(t *testing.T, mode string, args ...string) Config {
	t.Helper()
	return Config{
		Binary:        os.Args[0],
		Args:          args,
		Env:           []string{fakeEnv + "=" + mode},
		URLFromStdout: true,
		ReadyTimeout:  20 * time.Second,
	}
}

// get fetches url and returns the body, failing t on any error or a non-200 answer.
func get(t *testing.T, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d %q %v", url, resp.StatusCode, b, err)
	}
	return string(b)
}
