"""SGLang diffusion's released HTTP server (sglang 0.5.23) serving one mediaqual row.

Everything in front of the GPU is SGLang's own: ServerArgs, create_app, its routers, stores,
progress listener and response building. Only AsyncSchedulerClient._forward_one, the hop to
the GPU scheduler, is replaced: it renders the request with harness/peers/render (the row's
native Task, deterministic), reports per-step progress through SGLang's own ProgressReporter to the
server's progress endpoint, as the scheduler's denoising loop does, and answers with an
OutputBatch as the scheduler does (output_file_paths, output_image_bytes for image requests,
metrics.total_duration_ms from the Task's wall time, or error).

Usage: python sglang_peer.py --port P --model-path HF_ID --served-model-name ROW --row ROW
       --render RENDER --work DIR --dit-precision PRECISION
"""
import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standins  # noqa: E402

os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
standins.install(["IPython", "imageio_ffmpeg"])

import uvicorn  # noqa: E402
import zmq  # noqa: E402

from sglang.multimodal_gen.runtime import scheduler_client  # noqa: E402
from sglang.multimodal_gen.runtime.entrypoints.http_server import create_app  # noqa: E402
from sglang.multimodal_gen.runtime.managers.progress_reporter import ProgressReporter  # noqa: E402
from sglang.multimodal_gen.runtime.pipelines_core.schedule_batch import OutputBatch  # noqa: E402
from sglang.multimodal_gen.runtime.server_args import ServerArgs, set_global_server_args  # noqa: E402
from sglang.multimodal_gen.runtime.utils.perf_logger import RequestMetrics  # noqa: E402

import render  # noqa: E402


# model_index.json of the checkpoints the rows stand for: SGLang picks its pipeline config and
# sampling defaults from it, as from a downloaded checkpoint (no weights are read: no GPU hop).
MODEL_INDEX = {
    "Wan-AI/Wan2.1-T2V-1.3B-Diffusers": {
        "_class_name": "WanPipeline", "_diffusers_version": "0.36.0",
        "transformer": ["diffusers", "WanTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"], "text_encoder": ["transformers", "UMT5EncoderModel"],
        "tokenizer": ["transformers", "T5TokenizerFast"], "scheduler": ["diffusers", "UniPCMultistepScheduler"],
    },
    "Qwen/Qwen-Image-Edit-2511": {
        "_class_name": "QwenImageEditPlusPipeline", "_diffusers_version": "0.36.0",
        "transformer": ["diffusers", "QwenImageTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLQwenImage"], "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"], "processor": ["transformers", "Qwen2VLProcessor"],
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    },
}


def checkpoint_dir(work, hf_id):
    """A checkpoint directory holding hf_id's model_index.json and empty component configs."""
    root = os.path.join(work, "models", hf_id)
    index = MODEL_INDEX[hf_id]
    for component in index:
        if not component.startswith("_"):
            os.makedirs(os.path.join(root, component), exist_ok=True)
            with open(os.path.join(root, component, "config.json"), "w") as f:
                f.write("{}")
    with open(os.path.join(root, "model_index.json"), "w") as f:
        json.dump(index, f)
    return root


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--served-model-name", required=True)
    ap.add_argument("--row", required=True)
    ap.add_argument("--render", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--dit-precision", required=True)
    args = ap.parse_args()

    server_args = ServerArgs.from_kwargs(
        model_path=checkpoint_dir(args.work, args.model_path), served_model_name=args.served_model_name, port=args.port,
        output_path=os.path.join(args.work, "outputs"), input_save_path=os.path.join(args.work, "uploads"),
        dit_precision=args.dit_precision,
    )
    renderer = render.Renderer(args.render, args.row, os.path.join(args.work, "render"))
    progress = {}

    async def forward_one(self, endpoint, batch, timeout_ms):
        if not isinstance(batch, list):
            return OutputBatch(error=f"the peer stand-in serves generation requests only, not {type(batch).__name__}")
        req = batch[0]
        sp = req.sampling_params
        reporter = progress.get("reporter")
        if reporter is None and server_args.progress_endpoint is not None:
            reporter = progress["reporter"] = ProgressReporter(zmq.Context.instance(), server_args.progress_endpoint)
        ids = req.client_request_ids() if getattr(req, "report_progress", False) else []
        if reporter is not None and ids:
            reporter.start(request_ids=ids)
        fields = {"prompt": sp.prompt, "size": f"{sp.width}x{sp.height}", "seed": str(sp.seed)}
        if sp.num_inference_steps is not None:
            fields["num_inference_steps"] = str(sp.num_inference_steps)
        if sp.guidance_scale is not None:
            fields["guidance_scale"] = render.number(sp.guidance_scale)
        images = sp.image_path if isinstance(sp.image_path, list) else [p for p in [sp.image_path] if p]
        if not images:
            fields["num_frames"], fields["fps"] = str(sp.num_frames), str(sp.fps)

        def step(done, total):
            if reporter is not None and ids:
                reporter.step(request_ids=ids, completed=done, total=total)

        out = await renderer.run(fields, images[0] if images else None, step)
        if out.error:
            return OutputBatch(error=out.error)
        target = req.output_file_path(1, 0) or out.path
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        data = render.convert(out.path, target)
        metrics = RequestMetrics(req.request_id)
        metrics.total_duration_ms = out.task_ms
        ob = OutputBatch(output_file_paths=[target], metrics=metrics)
        if images:
            ob.output_image_bytes = [data]
        return ob

    scheduler_client.AsyncSchedulerClient._forward_one = forward_one
    set_global_server_args(server_args)
    app = create_app(server_args)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", loop="asyncio")


if __name__ == "__main__":
    main()
