// Package peers starts the media servers people run, from their released packages, serving one
// of mediaqual's reference rows on a CPU: SGLang diffusion (sglang 0.5.23) and vLLM-Omni
// (vllm-omni 0.30.0 on vllm 0.30.0). Each runs its own app factory, routers, stores, response
// building and media path unchanged (scripts/peers), on real torch, diffusers, imageio, PyAV and
// OpenCV: SGLang's worker saves the video or image itself (its ffmpeg encode), vLLM-Omni's engine
// post-processes the frames and its server encodes them (PyAV) on its default output path. Only
// the model is stood in, the pipeline's forward: the row's native Task renders the frames
// (harness/peers/render) and the stand-in hands them to the peer as the tensors its pipeline
// returns, reporting progress through the peer's own progress code; the GPU kernels the peers
// import are inert stand-ins. docs/EXTERNAL.md says file by file what is the peer's. The peers'
// conformance test (make test) qualifies them through harness/qualify with their wire profiles.
package peers

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/harness/launch"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models/spec"
)

// Peer is one server and how to start it.
type Peer struct {
	Name    string
	Profile wire.Profile
	Script  string // under scripts/peers
	// Checkpoints are the checkpoints a row of each workload stands for: the peer picks its
	// pipeline configuration and sampling defaults from it, as from a downloaded checkpoint.
	Checkpoints map[spec.Capability]string
}

// The peers, in the order the conformance test runs them.
var (
	SGLang   = Peer{Name: "sglang", Profile: wire.SGLang, Script: "sglang_peer.py", Checkpoints: checkpoints}
	VLLMOmni = Peer{Name: "vllm-omni", Profile: wire.VLLMOmni, Script: "vllm_omni_peer.py", Checkpoints: checkpoints}
	All      = []Peer{SGLang, VLLMOmni}
)

var checkpoints = map[spec.Capability]string{
	spec.TextToVideo: "Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
	spec.ImageEdit:   "Qwen/Qwen-Image-Edit-2511",
}

// EnvVenv names the peers' virtualenv (scripts/peers/requirements.txt); default .cache/peers in
// the module root, which `make peers` (part of make test) builds.
const EnvVenv = "MEDIAQUAL_PEERS_VENV"

// Python is the peers' virtualenv's python.
func Python(root string) (string, error) {
	venv := os.Getenv(EnvVenv)
	if venv == "" {
		venv = filepath.Join(root, ".cache", "peers")
	}
	py := filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(py); err != nil {
		return "", fmt.Errorf("no peers virtualenv at %s (%v): run `make peers` (make test does) or set %s", venv, err, EnvVenv)
	}
	// `make peers` points the venv at the torch venv's site-packages (mediaqual-torch.pth).
	pth, _ := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages", "mediaqual-torch.pth"))
	for _, f := range pth {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		site := strings.TrimSpace(string(b))
		if _, err := os.Stat(filepath.Join(site, "torch")); err != nil {
			return "", fmt.Errorf("the peers virtualenv reads torch from %s (%s), which has none: run `make torch` (make test does)", site, f)
		}
	}
	return py, nil
}

// BuildRender builds harness/peers/render (root is the module root) to out.
func BuildRender(root, out string) error {
	build := exec.Command("go", "build", "-o", out, "./harness/peers/render")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building harness/peers/render: %v\n%s", err, b)
	}
	return nil
}

// Config says what to start.
type Config struct {
	Root   string // the module root (scripts/peers is under it)
	Python string // Python's
	Render string // the harness/peers/render binary
	Dir    string // the peer's working directory: its uploads, outputs and log
}

// Start starts p serving e and waits until its /health answers. The caller stops it.
func Start(cfg Config, p Peer, e spec.Entry) (*launch.Server, error) {
	hf, ok := p.Checkpoints[e.Workload]
	if !ok {
		return nil, fmt.Errorf("%s: no checkpoint for workload %s", p.Name, e.Workload)
	}
	port, err := launch.FreePort()
	if err != nil {
		return nil, err
	}
	args := []string{filepath.Join(cfg.Root, "scripts", "peers", p.Script), "--port", strconv.Itoa(port),
		"--served-model-name", e.ID, "--row", e.ID, "--render", cfg.Render, "--work", cfg.Dir}
	if p.Name == SGLang.Name {
		// The operator's --dit-precision: the DiT precision the row serves, which SGLang's
		// /v1/models then declares (dit_precision).
		args = append(args, "--model-path", hf, "--dit-precision", e.Precision)
	} else {
		args = append(args, "--model", hf, "--workload", string(e.Workload))
	}
	srv, err := launch.Launch(launch.Config{
		Binary: cfg.Python, Args: args, Dir: cfg.Dir, Port: port, ReadyPath: "/health",
		Env: []string{"PYTHONDONTWRITEBYTECODE=1"},
		// vLLM-Omni's server drains for several seconds on SIGTERM; nothing of it is under test.
		StopTimeout: 3 * time.Second,
	})
	if err != nil && srv != nil { // started but not ready: Launch leaves stopping it to us
		_ = srv.Stop()
		return nil, err
	}
	return srv, err
}
