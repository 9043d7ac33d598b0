package aiperf

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/internal/procgroup"
)

// Endpoint types this suite drives.
const (
	VideoGeneration = "video_generation"
	ImageEdit       = "image_edit"
)

// Run is one AIPerf profile: what to send, how much, and where the exports go.
type Run struct {
	Model       string
	URL         string
	Endpoint    string // VideoGeneration or ImageEdit
	Tokenizer   string // a local tokenizer directory: nothing is fetched from a hub
	InputFile   string // single_turn JSONL
	Extra       [][2]string
	Warmup      int
	Requests    int
	Concurrency int
	ArtifactDir string
	// PollInterval is AIPERF_HTTP_VIDEO_POLL_INTERVAL, stated rather than left to a default.
	PollInterval   time.Duration
	RequestTimeout time.Duration
	APIKey         string
}

// Args is the argv after the aiperf binary.
func (r Run) Args() []string {
	a := []string{"profile", "--model", r.Model, "--url", r.URL, "--endpoint-type", r.Endpoint,
		"--tokenizer", r.Tokenizer, "--input-file", r.InputFile, "--custom-dataset-type", "single_turn"}
	for _, kv := range r.Extra {
		a = append(a, "--extra-inputs", kv[0]+":"+kv[1])
	}
	if r.Endpoint == VideoGeneration {
		a = append(a, "--download-video-content")
	}
	if r.Warmup > 0 { // AIPerf rejects an explicit 0
		a = append(a, "--warmup-request-count", strconv.Itoa(r.Warmup))
	}
	a = append(a,
		"--request-count", strconv.Itoa(r.Requests),
		"--concurrency", strconv.Itoa(max(1, r.Concurrency)),
		"--export-level", "raw", "--artifact-dir", r.ArtifactDir,
		// Loopback, no metrics endpoint, no GPU telemetry: nothing leaves the machine.
		"--no-server-metrics", "--no-gpu-telemetry", "--ui-type", "none",
		// The prompts are the input file's, verbatim; the default corpus (sonnets) would still be
		// tokenized at start, about 1.1 of a run's 7 CPU s here, for synthetic prompts never made.
		// No token counts: a media endpoint's answers have none and the suite reads none; without
		// it AIPerf tokenizes every prompt and first warms its tokenizer in a process of its own
		// (about 1.2 of a run's 6.2 CPU s).
		"--prompt-corpus", "random", "--use-server-token-count")
	if r.RequestTimeout > 0 {
		a = append(a, "--request-timeout-seconds", strconv.FormatFloat(r.RequestTimeout.Seconds(), 'f', -1, 64))
	}
	if r.APIKey != "" {
		a = append(a, "--api-key", r.APIKey)
	}
	return a
}

// Environ is the environment AIPerf runs with on top of the caller's.
func (r Run) Environ() []string {
	env := []string{
		// HF_HUB_OFFLINE must stay unset: in 0.13.0 it makes a local tokenizer path fail
		// (docs/AIPERF.md); a local path never reaches the hub anyway.
		"HF_HUB_DISABLE_TELEMETRY=1",
	}
	if r.Endpoint == VideoGeneration {
		env = append(env, "AIPERF_HTTP_VIDEO_POLL_INTERVAL="+strconv.FormatFloat(r.PollInterval.Seconds(), 'f', -1, 64))
	}
	return env
}

// CommandLine is the exact command, as a user would paste it (the API key redacted).
func (r Run) CommandLine(binary string) string {
	parts := append([]string{}, r.Environ()...)
	parts = append(parts, binary)
	for _, a := range r.Args() {
		if a == r.APIKey && a != "" {
			a = "<key>"
		}
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:=@,+", c))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Exec runs the profile. AIPerf's console output goes to aiperf.console.log in the artifact
// directory; a failure quotes its tail.
func (e Env) Exec(ctx context.Context, r Run) error {
	if err := os.MkdirAll(r.ArtifactDir, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(r.ArtifactDir, "aiperf.console.log")
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	// AIPerf 0.13 leaves directories in TMPDIR after every run (an empty aiperf_mmap_<id>, and
	// the mkdtemp directories of its ZMQ IPC sockets): give it a TMPDIR of its own and remove
	// it. A short one: the socket paths live about 60 bytes below it and must stay within the
	// 107-byte limit of a Unix socket address, which a deep artifact directory, or a deep
	// TMPDIR (a test's t.TempDir), overflows; AIPerf then exits 0 having sent nothing.
	tmp, err := os.MkdirTemp(shortTempBase(os.TempDir()), "aiperf-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cmd := procgroup.Own(exec.CommandContext(ctx, e.Binary, r.Args()...))
	cmd.Env = append(os.Environ(), r.Environ()...)
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp, "AIPERF_DATASET_MMAP_BASE_PATH="+tmp)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("aiperf: %v\n%s", err, tail(string(b), 3000))
	}
	return nil
}

// shortTempBase is base when AIPerf's IPC socket paths below it fit a Unix socket address,
// else /tmp.
func shortTempBase(base string) string {
	if len(base) > maxTempBase {
		return "/tmp"
	}
	return base
}

// maxTempBase: 107 bytes of a socket path less AIPerf's "/aiperf-NNNNNNNNNN/tmpXXXXXXXX/aiperf/
// event_bus_proxy_frontend.ipc" (about 67).
const maxTempBase = 40
