package peers_test

import (
	"encoding/json"
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

	"github.com/mediaqual/mediaqual/harness/jobmodel"
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
// field comes from, what its model list says, how it names fields in errors, what it reports it
// produced, its own encoder and the rules of the job model it breaks (Departs); and docs/EXTERNAL.md's account of the peers' media paths (mediaClaims) and of what
// is stood in (holdStandIns). A new release that changes one fails here, naming the claim.
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
		{"vLLM-Omni reports the frames it encodes (counted in the MP4 on the pre-encoded path alone)", vo + "serving_video.py", `num_frames = count_video_frames\(video\)(?s:.*)metadata\["num_frames"\] = num_frames`},
		{"vLLM-Omni reports the duration", vo + "serving_video.py", `metadata\["duration_s"\] = num_frames / artifacts\.output_fps`},
		{"vLLM's error code is an integer", "vllm/entrypoints/serve/engine/protocol.py", `class ErrorInfo\(OpenAIBaseModel\):\s+message: str\s+type: str\s+param: str \| None = None\s+code: int`},
		{"vLLM names a field by its dotted location (body.<field>)", "vllm/entrypoints/serve/exception_handling/handlers/validation.py", `def clean_loc_for_param\(loc: tuple\) -> str:`},
	} {
		assert.Regexp(t, c.re, read(c.file), "%s (%s)", c.what, c.file)
	}
	for _, c := range mediaClaims {
		assert.Regexp(t, c.re, read(c.file), "%s (%s; docs/EXTERNAL.md)", c.what, c.file)
	}
	// Both encode clips with an encoder of their own (mediaClaims: SGLang's libx264 writer,
	// vLLM-Omni's _encode_video_bytes), which identity holds to the floors, not to equal frames.
	assert.True(t, wire.SGLang.OwnEncoder && wire.VLLMOmni.OwnEncoder, "wire.Profile.OwnEncoder")
	// The rules of the job API's model each profile says the peer's code breaks: a rule of the
	// model, and the line that breaks it in the installed source.
	for _, p := range []wire.Profile{wire.SGLang, wire.VLLMOmni} {
		for check, d := range p.Departs {
			assert.True(t, slices.ContainsFunc(jobmodel.Rules, func(r jobmodel.Rule) bool { return r.Check == check }), "%s departs from %s, no rule of the model", p.Name, check)
			assert.Contains(t, read(d.File), d.Source, "%s's departure from %s", p.Name, check)
		}
	}
	holdStandIns(t, root, python)
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

// mediaClaims are what docs/EXTERNAL.md says of the peers' media paths, each held to the line of
// the installed source it cites: what runs, what the stand-ins hand over, and the true findings.
var mediaClaims = []claim{
	{"SGLang's worker saves the outputs itself (save_outputs)", "sglang/multimodal_gen/runtime/managers/gpu_worker.py", `def _save_output_paths(?s:.*)output_batch\.output_file_paths = save_outputs\(`},
	{"SGLang's inference_time_s is the worker's time of the forward, before the save", "sglang/multimodal_gen/runtime/managers/gpu_worker.py", `result = forward_fn\(\)(?s:.*)duration_ms = \(time\.monotonic\(\) - start_time\) \* 1000(?s:.*)metrics\.total_duration_ms = duration_ms(?s:.*)self\._finalize_output_batch\(`},
	{"SGLang's decoded frames are float in [0, 1] (what its stand-in returns)", "sglang/multimodal_gen/runtime/pipelines_core/stages/decoding.py", `return \(image / 2 \+ 0\.5\)\.clamp\(0, 1\)(?s:.*)output_batch = OutputBatch\(\s+output=frames,`},
	{"SGLang's uint8 conversion truncates", "sglang/multimodal_gen/runtime/entrypoints/utils.py", `sample = \(sample \* 255\)\.clamp\(0, 255\)\.to\(torch\.uint8\)`},
	{"SGLang's video encoder is imageio-ffmpeg's binary", "sglang/multimodal_gen/runtime/entrypoints/utils.py", `def _resolve_ffmpeg_exe\(\) -> str:\s+# keep the pinned encoder binary: x264 upgrades change lossy video pixels\s+return imageio_ffmpeg\.get_ffmpeg_exe\(\)`},
	{"SGLang's writer: libx264, preset fast, CRF from quality, yuv420p", "sglang/multimodal_gen/runtime/entrypoints/utils.py", `X264_PRESET = "fast"(?s:.*)def _save_video_ffmpeg\((?s:.*)"libx264",\s+"-preset",\s+x264_preset or X264_PRESET,\s+"-pix_fmt",\s+"yuv420p",\s+"-crf",\s+str\(int\(\(1 - quality / 10\.0\) \* 51\)\)`},
	{"SGLang's default quality is 5 (CRF 25)", "sglang/multimodal_gen/runtime/entrypoints/utils.py", `quality = output_compression / 10 if output_compression is not None else 5`},
	{"SGLang's writer scales a size that is not a multiple of 16 up to one", "sglang/multimodal_gen/runtime/entrypoints/utils.py", `if width % 16 or height % 16:\s+command \+= \[\s+"-vf",\s+f"scale=\{\(width \+ 15\) // 16 \* 16\}:\{\(height \+ 15\) // 16 \* 16\}",`},
	{"SGLang saves a CUDA video another way (CudaVideoEncoder), a CPU one through _save_video_ffmpeg", "sglang/multimodal_gen/runtime/entrypoints/utils.py", `if not hasattr\(os, "memfd_create"\) or device\.type != "cuda":\s+return None`},
	{"vLLM-Omni's Wan forward returns the VAE's decode as NORMALIZED_FLOAT media in [-1, 1] unless preencode_mp4", "vllm_omni/diffusion/models/wan2_2/pipeline_wan2_2.py", `if preencode_mp4:\s+output = decode_to_mp4\((?s:.*)encoding=VideoTensorEncoding\.NORMALIZED_FLOAT,\s+value_range=VideoValueRange\.NEGATIVE_ONE_TO_ONE,`},
	{"vLLM-Omni's Wan forward floors the size to 16 and rounds the frames to 4k+1 (inside the stood-in forward)", "vllm_omni/diffusion/models/wan2_2/pipeline_wan2_2.py", `height = \(height // mod_value\) \* mod_value(?s:.*)num_frames = num_frames // self\.vae_scale_factor_temporal \* self\.vae_scale_factor_temporal \+ 1`},
	{"vLLM-Omni's Qwen-Image-Edit forward returns the decode's first frame", "vllm_omni/diffusion/models/qwen_image/pipeline_qwen_image_edit_plus.py", `image = self\.vae\.decode\(latents, return_dict=False\)\[0\]\[:, :, 0\]`},
	{"vLLM-Omni's engine finalizes video media through diffusers' VideoProcessor", "vllm_omni/diffusion/postprocess/media.py", `frames = VideoProcessor\(vae_scale_factor=8\)\.postprocess_video\(`},
	{"vLLM-Omni's engine runs the pipeline's post_process_func on legacy output", "vllm_omni/diffusion/diffusion_engine.py", `outputs = finalize_diffusion_media\(media, sampling_params=request\.sampling_params\)(?s:.*)outputs = self\.post_process_func\(output_data, \*\*postprocess_kwargs\)`},
	{"vLLM-Omni's server encodes frames itself unless they arrive as MP4 bytes", "vllm_omni/entrypoints/openai/serving_video.py", `if isinstance\(artifacts\.videos\[0\], bytes\):(?s:.*)video_bytes = _encode_video_bytes\(`},
	{"vLLM-Omni's encoder defaults: preset ultrafast", "vllm_omni/entrypoints/openai/serving_video.py", `video_codec_options = \{"preset": "ultrafast", "threads": "0"\}`},
	{"vLLM-Omni rounds float frames to uint8 gbrp planes", "vllm_omni/entrypoints/openai/video_api_utils.py", `av_frame = av\.VideoFrame\(width, height, format="gbrp"\)(?s:.*)np\.rint\(scratch, out=scratch\)`},
	{"vLLM-Omni's muxer: PyAV h264, CRF 18, yuv420p, the rate as a fraction", "vllm_omni/diffusion/utils/media_utils.py", `def mux_av_video_audio_bytes\((?s:.*)crf: str = "18",(?s:.*)rate=Fraction\(fps\)\.limit_denominator\(10000\)(?s:.*)v_stream\.pix_fmt = "yuv420p"`},
	{"vLLM-Omni encodes an edit's image with Pillow", "vllm_omni/entrypoints/openai/image_api_utils.py", `image\.save\(buffer, format=pil_format, \*\*save_kwargs\)`},
}

// holdStandIns holds scripts/peers/standins.py to docs/EXTERNAL.md's table of stand-in packages
// (the same names), to what may be stood in (no media package, HTTP client or torch's), and the
// peers' environment to importing the real media stack.
func holdStandIns(t *testing.T, root, python string) {
	probe := exec.Command(python, "-c", `
import json, sys
sys.path.insert(0, "scripts/peers")
import standins
stood = sorted(standins.STANDINS) + sorted(standins.KERNELS)
standins.install()
import importlib.util, torch, imageio, imageio_ffmpeg, av  # imported for real, as the peers do
real = {m.__name__: getattr(m, "__file__", None) or "" for m in (torch, imageio, imageio_ffmpeg, av)}
for name in ["torchvision", "torchaudio", "diffusers", "cv2", "scipy", "soundfile", "PIL", "numpy", "aiohttp", "openai", "huggingface_hub", "httpx", "requests"]:
    real[name] = importlib.util.find_spec(name).origin or ""  # through the stand-ins' finder first
json.dump({"stood": stood, "real": real}, sys.stdout)
`)
	probe.Dir = root
	out, err := probe.Output()
	require.NoError(t, err, "the peers' environment imports its media stack")
	var got struct {
		Stood []string          `json:"stood"`
		Real  map[string]string `json:"real"`
	}
	require.NoError(t, json.Unmarshal(out, &got))

	doc, err := os.ReadFile(filepath.Join(root, "docs", "EXTERNAL.md"))
	require.NoError(t, err)
	var listed []string
	inTable := false
	for _, line := range strings.Split(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "| stand-in package |"):
			inTable = true
		case inTable && !strings.HasPrefix(line, "|"):
			inTable = false
		case inTable && !strings.HasPrefix(line, "|---"):
			cell := strings.Split(line, "|")[1]
			for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cell, -1) {
				listed = append(listed, m[1])
			}
		}
	}
	slices.Sort(listed)
	stood := slices.Sorted(slices.Values(got.Stood))
	assert.Equal(t, stood, listed, "docs/EXTERNAL.md's stand-in packages are scripts/peers/standins.py's STANDINS and KERNELS")

	// Never stood in: torch's, the media packages on the peers' output paths, the HTTP clients.
	for _, name := range stood {
		top, _, _ := strings.Cut(name, ".")
		assert.NotContains(t, []string{"torch", "torchvision", "torchaudio", "torchcodec", "triton", "diffusers", "imageio",
			"imageio_ffmpeg", "av", "cv2", "scipy", "soundfile", "librosa", "PIL", "numpy", "aiohttp", "openai",
			"huggingface_hub", "httpx", "requests", "urllib3"}, top, "%s is stood in", name)
	}
	for name, file := range got.Real {
		assert.True(t, filepath.IsAbs(file) && strings.Contains(file, "site-packages"), "%s imports the real package (%q)", name, file)
	}
}
