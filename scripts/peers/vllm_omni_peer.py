"""vLLM-Omni's released API server (vllm-omni 0.30.0 on vllm 0.30.0) serving one mediaqual row on a CPU.

What is vLLM-Omni's and runs unchanged: its CLI (`vllm serve MODEL --omni`), omni_run_server,
vLLM's app and exception handlers, its routers, stores, storage and response building; the
diffusion model runner's preparation of the decoded video for transport
(DiffusionModelRunner._prepare_output_for_transport); the engine's post-processing
(DiffusionEngine.postprocess_output: finalize_diffusion_media, diffusers' VideoProcessor for a
video, the pipeline's own post_process_func, diffusers' VaeImageProcessor, for an image, and
format_diffusion_outputs); and, in the server, the default output path, which encodes the frames
itself (serving_video's _encode_video_bytes through PyAV's libx264; an edit's
encode_image_base64_with_compression through Pillow), on real torch, diffusers and PyAV.

What is stood in: the model, the pipeline's forward. Its stand-in renders the request with
harness/peers/render (the row's own Task) and returns what the pipeline's forward returns: for
Wan (pipeline_wan2_2.py) a DiffusionOutput whose media is the VAE's decode, float
[B, 3, T, H, W] in [-1, 1], declared NORMALIZED_FLOAT, NEGATIVE_ONE_TO_ONE, never the opt-in
pre-encoded MP4 (extra_params.preencode_mp4); for Qwen-Image-Edit (pipeline_qwen_image_edit_plus.py)
its output, the decode's first frame, [B, 3, H, W] in [-1, 1]. The engine client between server
and engine (AsyncOmni, its orchestrator and stage processes: build_async_omni) is one object in
this process that reports the request started (the lifecycle output the diffusion worker emits),
runs the above and yields the engine's OmniRequestOutput, or raises the stage's error.

Usage: python vllm_omni_peer.py --port P --model HF_ID --served-model-name ROW --row ROW
       --workload W --render RENDER --work DIR      (W: text_to_video or image_edit)
"""
import argparse
import asyncio
import contextlib
import json
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standins  # noqa: E402

standins.install()
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from vllm_omni.diffusion.data import (  # noqa: E402
    DIFFUSION_REQUEST_LIFECYCLE_KEY,
    DIFFUSION_REQUEST_STARTED,
    DiffusionOutput,
    OmniDiffusionConfig,
)
from vllm_omni.diffusion.diffusion_engine import DiffusionEngine, _func_accepts_parameter  # noqa: E402
from vllm_omni.diffusion.media import (  # noqa: E402
    DiffusionMediaOutput,
    VideoMediaOutput,
    VideoTensorEncoding,
    VideoTensorLayout,
    VideoTensorSpec,
    VideoValueRange,
)
from vllm_omni.diffusion.registry import get_diffusion_post_process_func  # noqa: E402
from vllm_omni.diffusion.request import OmniDiffusionRequest  # noqa: E402
from vllm_omni.diffusion.worker.diffusion_model_runner import DiffusionModelRunner  # noqa: E402
from vllm_omni.entrypoints.cli.main import main as vllm_main  # noqa: E402
from vllm_omni.entrypoints.openai import api_server  # noqa: E402
from vllm_omni.outputs import OmniRequestOutput  # noqa: E402

import render  # noqa: E402

# The checkpoints the rows stand for: the pipeline class vLLM-Omni picks from model_index.json,
# and the files its post-processing reads (no weights: the model is stood in). Qwen-Image's VAE
# config names its temporal downsampling as diffusers spells it (temperal_downsample).
CHECKPOINTS = {
    "Wan-AI/Wan2.1-T2V-1.3B-Diffusers": {"model_index.json": {"_class_name": "WanPipeline"}},
    "Qwen/Qwen-Image-Edit-2511": {
        "model_index.json": {"_class_name": "QwenImageEditPlusPipeline"},
        "vae/config.json": {"_class_name": "AutoencoderKLQwenImage", "z_dim": 16, "temperal_downsample": [False, True, True]},
    },
}


def checkpoint_dir(work, hf_id):
    root = os.path.join(work, "models", hf_id)
    for name, content in CHECKPOINTS[hf_id].items():
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        with open(os.path.join(root, name), "w") as f:
            json.dump(content, f)
    return root


class Engine:
    """The engine client (AsyncOmni, for one diffusion stage) and, behind it, the engine."""

    def __init__(self, media, output_type, checkpoint):
        self.media = media  # renders the frames (render.Renderer)
        self.output_type = output_type
        self.stage_configs = [{"stage_id": 0, "stage_type": "diffusion", "final_output": True,
                               "final_output_type": output_type}]
        self.default_sampling_params_list = []
        self.endpoint_restrictions = ()
        # AsyncOmni's, for pure diffusion (no comprehension stage).
        self.vllm_config = self.model_config = self.input_processor = self.io_processor = self.renderer = None
        with open(os.path.join(checkpoint, "model_index.json")) as f:
            pipeline = json.load(f)["_class_name"]
        od_config = OmniDiffusionConfig(model=checkpoint, model_class_name=pipeline)
        # DiffusionEngine's post-processing state (_init_process_hooks), without its executor.
        self.engine = object.__new__(DiffusionEngine)
        self.engine.od_config = od_config
        self.engine.post_process_func = get_diffusion_post_process_func(od_config)
        self.engine._post_process_accepts_sampling_params = _func_accepts_parameter(self.engine.post_process_func, "sampling_params")
        self.runner = types.SimpleNamespace(od_config=od_config)  # DiffusionModelRunner's, for transport

    async def get_vllm_config(self):
        return None  # pure diffusion: no language-model stage

    async def get_supported_tasks(self):
        return ("generate",)

    async def check_health(self):
        return None

    async def abort(self, request_id, timeout=None):
        return None

    def forward(self, prompt, sp, reference):
        """The pipeline's forward: the row's Task renders the frames, returned as the VAE decodes them."""
        text = prompt.get("prompt") if isinstance(prompt, dict) else prompt
        fields = {"prompt": text}
        video = self.output_type == "video"
        for name in ("num_inference_steps", "seed") + (("num_frames",) if video else ()):
            if getattr(sp, name, None) is not None:
                fields[name] = str(getattr(sp, name))
        for name in ("guidance_scale",) + (("fps",) if video else ()):  # floats in OmniDiffusionSamplingParams
            if getattr(sp, name, None) is not None:
                fields[name] = render.number(getattr(sp, name))
        if getattr(sp, "width", None) and getattr(sp, "height", None):
            fields["size"] = f"{sp.width}x{sp.height}"
        out = self.media.run(fields, reference, lambda done, total: None)
        if out.error:
            raise RuntimeError(out.error)  # as DiffusionEngine raises a worker's (non-client) error
        frames = torch.from_numpy(render.frames(out)).permute(3, 0, 1, 2)  # [3, T, H, W] uint8
        decoded = (frames.to(torch.float32) / 127.5 - 1).unsqueeze(0)  # the VAE's range, [-1, 1]
        durations = {"diffusion": out.task_ms / 1000}
        if not video:  # QwenImageEditPlusPipeline: vae.decode(...)[0][:, :, 0]
            return DiffusionOutput(output=decoded[:, :, 0], stage_durations=durations)
        spec = VideoTensorSpec(layout=VideoTensorLayout.BCTHW, encoding=VideoTensorEncoding.NORMALIZED_FLOAT,
                               value_range=VideoValueRange.NEGATIVE_ONE_TO_ONE)
        media = DiffusionMediaOutput(video=VideoMediaOutput(tensor=decoded, spec=spec))
        return DiffusionOutput(output=None, media=media, stage_durations=durations)

    def step(self, request_id, prompt, sp, reference):
        """One request through the worker and the engine: the forward, the runner's transport
        preparation, the engine's post-processing."""
        output = self.forward(prompt, sp, reference)
        output = DiffusionModelRunner._prepare_output_for_transport(self.runner, output, sp)
        request = OmniDiffusionRequest(prompt=prompt, sampling_params=sp, request_id=request_id)
        return DiffusionEngine.postprocess_output(self.engine, request, output)

    async def generate(self, prompt, request_id, sampling_params_list, **kwargs):
        sp = sampling_params_list[0]
        if getattr(sp, "emit_request_lifecycle", False):
            yield OmniRequestOutput.from_diffusion(request_id=request_id, images=[], finished=False,
                                                   custom_output={DIFFUSION_REQUEST_LIFECYCLE_KEY: DIFFUSION_REQUEST_STARTED})
        reference = None
        data = prompt.get("multi_modal_data") if isinstance(prompt, dict) else None
        if data and data.get("image") is not None:
            image = data["image"][0] if isinstance(data["image"], list) else data["image"]
            reference = os.path.join(self.media.work, f"{request_id}-reference.png")
            image.save(reference, format="PNG")
        try:
            outputs = await asyncio.to_thread(self.step, request_id, prompt, sp, reference)
        finally:
            if reference:
                os.remove(reference)
        for out in outputs:
            yield out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--served-model-name", required=True)
    ap.add_argument("--row", required=True)
    ap.add_argument("--workload", required=True, choices=["text_to_video", "image_edit"])
    ap.add_argument("--render", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    renderer = render.Renderer(args.render, args.row, os.path.join(args.work, "render"))
    checkpoint = checkpoint_dir(args.work, args.model)
    engine = Engine(renderer, "video" if args.workload == "text_to_video" else "image", checkpoint)

    @contextlib.asynccontextmanager
    async def build_async_omni(cli_args, **kwargs):
        yield engine

    api_server.build_async_omni = build_async_omni
    os.environ.setdefault("VLLM_OMNI_STORAGE_PATH", os.path.join(args.work, "storage"))
    # The checkpoint as downloaded (no hub here: HF_HUB_OFFLINE), served under the row's name.
    sys.argv = ["vllm", "serve", checkpoint, "--omni", "--host", "127.0.0.1", "--port", str(args.port),
                "--served-model-name", args.served_model_name]
    vllm_main()


if __name__ == "__main__":
    main()
