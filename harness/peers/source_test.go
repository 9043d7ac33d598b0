package peers_test

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/peers"
	"github.com/mediaqual/mediaqual/harness/wire"
)

// claim is one thing a wire profile says of a peer, and where the released package says it.
type claim struct {
	what string
	file string // under site-packages
	re   string // must match the file
}

// TestProfilesHoldToReleasedSource holds every claim of the SGLang and vLLM-Omni wire profiles
// to the released packages' source as installed in the peers' virtualenv (sglang 0.5.23,
// vllm-omni 0.30.0, vllm 0.30.0): the statuses each can emit, how it deletes, where its time
// field comes from, what its model list says, how it names fields in errors and what it reports
// it produced. A new release that changes one fails here, naming the claim.
func TestProfilesHoldToReleasedSource(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	python, err := peers.Python(root)
	require.NoError(t, err)
	out, err := exec.Command(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
	require.NoError(t, err)
	site := strings.TrimSpace(string(out))
	read := func(file string) string {
		b, err := os.ReadFile(filepath.Join(site, file))
		require.NoError(t, err, "the profile cites %s", file)
		return string(b)
	}
	const sg = "sglang/multimodal_gen/runtime/entrypoints/openai/"
	const vo = "vllm_omni/entrypoints/openai/"

	// Every status SGLang's video jobs take, read from the code that sets them.
	var statuses []string
	for _, f := range []string{sg + "video_api.py", sg + "video_progress.py"} {
		for _, m := range regexp.MustCompile(`(?:"status": |\["status"\] = )"(\w+)"`).FindAllStringSubmatch(read(f), -1) {
			if !slices.Contains(statuses, m[1]) {
				statuses = append(statuses, m[1])
			}
		}
	}
	slices.Sort(statuses)
	claimed := append(slices.Collect(maps.Keys(wire.SGLang.Statuses)), wire.SGLang.Deleted)
	slices.Sort(claimed)
	assert.Equal(t, statuses, claimed, "SGLang's statuses and its delete status (wire.SGLang.Statuses, Deleted)")

	// vLLM-Omni's: its VideoGenerationStatus enum.
	statuses = nil
	for _, m := range regexp.MustCompile(`(?m)^\s+[A-Z_]+ = "(\w+)"$`).FindAllStringSubmatch(enumBody(t, read(vo+"protocol/videos.py"), "VideoGenerationStatus"), -1) {
		statuses = append(statuses, m[1])
	}
	slices.Sort(statuses)
	claimed = slices.Sorted(maps.Keys(wire.VLLMOmni.Statuses))
	assert.Equal(t, statuses, claimed, "vLLM-Omni's statuses (wire.VLLMOmni.Statuses)")
	assert.Empty(t, wire.VLLMOmni.Deleted, "vLLM-Omni answers a delete with {id, deleted, object}")

	for _, c := range []claim{
		{"SGLang creates from multipart or JSON", sg + "video_api.py", `is_multipart = "multipart/form-data" in content_type(?s:.*)await request\.json\(\)`},
		{"SGLang reports in_progress with the scheduler's progress", sg + "video_progress.py", `job\["status"\] = "in_progress"\s+job\["progress"\] = max\(job\["progress"\], min\(progress, 99\)\)`},
		{"SGLang's delete answers the job at status deleted", sg + "video_api.py", `job\["status"\] = "deleted"`},
		{"SGLang's inference_time_s is the pipeline's total_duration_s", sg + "utils.py", `response\["inference_time_s"\] = result\.metrics\.total_duration_s`},
		{"SGLang's image edits answer with add_common_data_to_response too", sg + "image_api.py", `add_common_data_to_response`},
		{"SGLang's model card declares supported_task_types and dit_precision", sg + "common_api.py", `"supported_task_types": \[(?s:.*)"dit_precision": server_args\.pipeline_config\.dit_precision`},
		{"SGLang's edit picks jpg unless an output format is named", sg + "image_api.py", `choose_output_image_ext`},
		{"vLLM-Omni creates from a form only", vo + "api_server.py", `Depends\(_parse_video_form\)`},
		{"vLLM-Omni answers a failed job's poll with its error's status", vo + "api_server.py", `if job\.status == VideoGenerationStatus\.FAILED:\s+status_code = _status_code_for_video_failure`},
		{"vLLM-Omni's inference_time_s spans generation and the save", vo + "video/generation/helpers.py", `"inference_time_s": time\.perf_counter\(\) - started_at`},
		{"vLLM-Omni reports the produced fps", vo + "serving_video.py", `metadata\["fps"\] = artifacts\.output_fps`},
		{"vLLM-Omni reports the frames counted in the MP4", vo + "serving_video.py", `metadata\["num_frames"\] = num_frames`},
		{"vLLM-Omni reports the duration", vo + "serving_video.py", `metadata\["duration_s"\] = num_frames / artifacts\.output_fps`},
		{"vLLM's error code is an integer", "vllm/entrypoints/serve/engine/protocol.py", `class ErrorInfo\(OpenAIBaseModel\):\s+message: str\s+type: str\s+param: str \| None = None\s+code: int`},
		{"vLLM names a field by its dotted location (body.<field>)", "vllm/entrypoints/serve/exception_handling/handlers/validation.py", `def clean_loc_for_param\(loc: tuple\) -> str:`},
	} {
		assert.Regexp(t, c.re, read(c.file), "%s (%s)", c.what, c.file)
	}
	assert.Equal(t, "body.", wire.VLLMOmni.ParamPrefix)
	assert.Equal(t, []string{"num_frames", "fps", "duration_s"}, wire.VLLMOmni.Produced)

	// What the model lists can say: SGLang's card has no revision or profile field; vLLM's none
	// of the four.
	card := classBody(t, read(sg+"common_api.py"), "DiffusionModelCard") + classBody(t, read(sg+"common_api.py"), "ModelCard")
	for field, says := range map[string]bool{"supported_task_types": true, "dit_precision": true, "revision": false, "profile": false} {
		assert.Equal(t, says, strings.Contains(card, "    "+field+":"), "SGLang's model card field %s", field)
	}
	vcard := classBody(t, read("vllm/entrypoints/serve/engine/protocol.py"), "ModelCard")
	for _, field := range []string{"capabilities", "revision", "precision", "profile"} {
		assert.NotContains(t, vcard, "    "+field+":", "vLLM's model card says no %s", field)
	}
	tasks := read("sglang/multimodal_gen/configs/task_type.py")
	for tt := range wire.SGLang.Models.TaskTypes {
		assert.Regexp(t, `(?m)^\s+`+tt+` = auto\(\)`, tasks, "SGLang task type %s", tt)
	}

	// Every file a profile's Source names exists.
	for _, p := range []wire.Profile{wire.SGLang, wire.VLLMOmni} {
		for _, f := range sourceFiles(p.Source) {
			_, err := os.Stat(filepath.Join(site, f))
			assert.NoError(t, err, "%s's Source names %s", p.Name, f)
		}
	}
}

// classBody is the body of a Python class (up to the next top-level statement).
func classBody(t *testing.T, src, class string) string {
	i := strings.Index(src, "\nclass "+class+"(")
	require.GreaterOrEqual(t, i, 0, "class %s", class)
	rest := src[i+1:]
	if j := regexp.MustCompile(`\n\S`).FindStringIndex(rest[1:]); j != nil {
		return rest[:j[0]+1]
	}
	return rest
}

func enumBody(t *testing.T, src, class string) string { return classBody(t, src, class) }

// sourceFiles expands a profile's Source ("pkg (PyPI): dir/{a,b}.py; pkg2: dir/c.py") into paths.
func sourceFiles(source string) []string {
	var out []string
	for _, part := range strings.Split(source, ";") {
		_, spec, ok := strings.Cut(part, ": ")
		if !ok {
			continue
		}
		spec = strings.TrimSpace(spec)
		if i := strings.Index(spec, "{"); i >= 0 {
			j := strings.Index(spec, "}")
			for _, name := range strings.Split(spec[i+1:j], ",") {
				f := spec[:i] + name + spec[j+1:]
				if !strings.HasSuffix(f, ".py") {
					f += ".py"
				}
				out = append(out, f)
			}
			continue
		}
		out = append(out, spec)
	}
	return out
}
