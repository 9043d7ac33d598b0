package peers_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/peers"
	"github.com/mediaqual/mediaqual/harness/qualify"
	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/reports"
)

// findings are the true findings of each peer on each reference row, by name, each for a
// reason in the peer's released code (docs/EXTERNAL.md's tables say which): a finding more or
// less is a protocol disagreement, in the peer's code or in the suite's reading of it.
var findings = map[string][]string{
	"sglang/ref-t2v": {"delete-shape", "error-envelope", "job-fields", "no-request-tie", "settings-unconfirmed", "shape", "timing-not-task",
		"unsupported-setting-accepted", "unsupported-setting-accepted", "unsupported-setting-accepted",
		"unsupported-setting-accepted", "unsupported-setting-accepted"},
	"sglang/ref-edit": {"edit-unconfirmed", "error-envelope", "shape",
		"unsupported-setting-accepted", "unsupported-setting-accepted", "unsupported-setting-accepted"},
	"vllm-omni/ref-t2v": {"error-code", "job-fields", "no-request-tie", "refusal-unnamed", "settings-partly-confirmed", "shape", "timing-not-task",
		"unsupported-setting-accepted", "unsupported-setting-accepted", "unsupported-setting-accepted", "unsupported-setting-accepted"},
	"vllm-omni/ref-edit": {"edit-no-timing", "edit-unconfirmed", "error-code", "shape",
		"unsupported-setting-accepted", "unsupported-setting-accepted", "unsupported-setting-accepted"},
}

// tutorialFlags are the flags AIPerf 0.13's own tutorials use against SGLang
// (docs/tutorials/sglang-video-generation.md, sglang-image-edit.md), each of which the suite's
// AIPerf command must use the same way. --tokenizer is the one the suite sets otherwise (a local
// tokenizer directory, not builtin, which downloads a tiktoken file: docs/AIPERF.md).
var tutorialFlags = map[spec.Capability][]string{
	spec.TextToVideo: {"--endpoint-type video_generation", "--input-file", "--custom-dataset-type single_turn",
		"--extra-inputs size:", "--extra-inputs seed:", "--extra-inputs num_inference_steps:", "--extra-inputs guidance_scale:",
		"--extra-inputs fps:", "--extra-inputs num_frames:", "--download-video-content", "--concurrency", "--request-count",
		"--request-timeout-seconds", "--export-level raw"},
	spec.ImageEdit: {"--endpoint-type image_edit", "--input-file", "--custom-dataset-type single_turn",
		"--extra-inputs size:", "--extra-inputs num_inference_steps:", "--extra-inputs guidance_scale:",
		"--concurrency", "--request-count", "--export-level raw"},
}

// The qualification of one peer and row runs in a process of its own (this test binary, running
// TestQualifyPeer), so that its row is judged here, stage by stage, rather than failing this test
// from inside qualify.Run.
const (
	envQualifyPeer = "MEDIAQUAL_PEERS_QUALIFY"        // "peer/row"
	envQualifyBin  = "MEDIAQUAL_PEERS_QUALIFY_RENDER" // the harness/peers/render binary
	envQualifyRow  = "MEDIAQUAL_PEERS_QUALIFY_ROW"    // where the row is written, as JSON
)

// TestPeerConformance qualifies the reference rows ref-t2v and ref-edit against both peers'
// released servers (sglang 0.5.23, vllm-omni 0.30.0) through the exported qualification, each
// with its wire profile; what they serve is made by their own media paths from the frames of the
// model's stand-in (the row's own Task). It fails on any disagreement: every stage passes, the
// decoded frames are held to the native ones by the checks any encoder meets (frame count, size,
// fps, the box-mean floors of encode-psnr, and identity's frame by frame, frame-psnr), the
// findings are exactly the true ones above, and what the peer cannot say is a named limit.
func TestPeerConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the peers' released servers and runs AIPerf")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	_, err = peers.Python(root)
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "render")
	require.NoError(t, peers.BuildRender(root, bin))

	for _, p := range peers.All {
		for _, id := range []string{"ref-t2v", "ref-edit"} {
			t.Run(p.Name+"/"+id, func(t *testing.T) {
				t.Parallel()
				out := filepath.Join(t.TempDir(), "row.json")
				cmd := exec.Command(os.Args[0], "-test.run=^TestQualifyPeer$", "-test.v", "-test.count=1", "-test.timeout=9m")
				cmd.Env = append(os.Environ(), envQualifyPeer+"="+p.Name+"/"+id, envQualifyBin+"="+bin, envQualifyRow+"="+out)
				output, runErr := cmd.CombinedOutput() // fails when a stage does: the row says which
				var row reports.Row
				b, err := os.ReadFile(out)
				if err == nil {
					err = json.Unmarshal(b, &row)
				}
				require.NoError(t, err, "the qualification wrote no row (%v):\n%s", runErr, output)
				defer func() {
					if t.Failed() {
						t.Logf("the qualification's output:\n%s", output)
					}
				}()

				e, err := models.Lookup(id)
				require.NoError(t, err)
				assert.Equal(t, reports.Passed, row.Outcome)
				for _, s := range row.Stages {
					assert.True(t, s.Passed, "%s: %s", s.Name, s.Message)
					switch s.Name {
					case qualify.StageServe:
						assert.NotContains(t, s.Message, "refused, each naming its field", "the peer refuses none of the settings by name")
						assert.Contains(t, s.Message, "not refused by name (findings)")
					case qualify.StageIdentity:
						if e.Workload == spec.TextToVideo {
							assert.Contains(t, s.Message, "encoded by the server's own encoder", "identity holds the peer's clips frame by frame to the floors")
						}
					case qualify.StageArtifacts:
						assert.Contains(t, s.Message, "encode-psnr measured on "+strconv.Itoa(row.Counts["artifacts_verified"]), "every artifact held to the native raw frames")
						if e.Workload == spec.TextToVideo {
							assert.Contains(t, s.Message, "the contract's encoder (its own, not mediaserve's)", "the clips are the peer's own encoder's")
						}
					}
				}
				var names []string
				for _, f := range row.Findings {
					name, _, _ := strings.Cut(f, ":")
					// A speed observation, on four qualifications sharing two cores: not protocol.
					if name != "serialised" {
						names = append(names, name)
					}
				}
				slices.Sort(names)
				assert.Empty(t, cmp.Diff(findings[p.Name+"/"+id], names), "findings (-want +got):\n%s", strings.Join(row.Findings, "\n"))

				var limits []string
				for _, l := range row.Limits {
					limits = append(limits, l.Why)
				}
				assert.Contains(t, strings.Join(limits, "\n"), "the endpoint's /v1/models ("+p.Name+") does not say the model's", "what the peer's model list cannot say is a limit")
				for _, flag := range tutorialFlags[e.Workload] {
					assert.Contains(t, row.AIPerfCommand, " "+flag, "AIPerf 0.13's SGLang tutorial uses %s", flag)
				}
				t.Logf("AIPerf: %s\nlimits:\n  %s\nfindings:\n  %s", row.AIPerfCommand, strings.Join(limits, "\n  "), strings.Join(row.Findings, "\n  "))
			})
		}
	}
}

// TestQualifyPeer is one qualification of TestPeerConformance, in a process of its own: it starts
// the peer named in the environment serving its row, qualifies it and writes the row.
func TestQualifyPeer(t *testing.T) {
	name, id, ok := strings.Cut(os.Getenv(envQualifyPeer), "/")
	if !ok {
		t.Skip("run by TestPeerConformance")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	python, err := peers.Python(root)
	require.NoError(t, err)
	i := slices.IndexFunc(peers.All, func(p peers.Peer) bool { return p.Name == name })
	require.GreaterOrEqual(t, i, 0, "peer %s", name)
	p := peers.All[i]
	e, err := models.Lookup(id)
	require.NoError(t, err)
	// This test holds the peers' protocol, not their speed: four qualifications share two
	// cores here, and AIPerf's own client then adds more than the reference rows' 1.5 s
	// (1.6-1.9 s seen). A stalled request still fails.
	e.MaxOverheadMS = 10_000
	srv, err := peers.Start(peers.Config{Root: root, Python: python, Render: os.Getenv(envQualifyBin), Dir: t.TempDir()}, p, e)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })

	cfg := qualify.Defaults()
	cfg.Root, cfg.Lookup = root, models.Lookup
	cfg.Target = qualify.Target{Endpoint: srv.URL, Profile: p.Profile}
	cfg.Warmup, cfg.Measured = 0, 2
	row := qualify.Run(t, e, cfg)
	if t.Failed() {
		t.Logf("%s log tail:\n%s", p.Name, srv.LogTail(60))
	}
	b, err := json.Marshal(row)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(os.Getenv(envQualifyRow), b, 0o644))
}
