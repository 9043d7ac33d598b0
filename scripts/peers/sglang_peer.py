"""SGLang diffusion's released server (sglang 0.5.23) serving one mediaqual row on a CPU.

What is SGLang's and runs unchanged: ServerArgs, create_app, its routers, stores, progress
listener and response building; the scheduler's dispatch of a generation request
(Scheduler._dispatch_single_request, _handle_generation, which starts its progress report); the
worker's execute_forward around the pipeline (its timing of the forward, which becomes
inference_time_s) and the worker's save of the output (GPUWorker._save_output_paths,
entrypoints/utils.save_outputs: the uint8 conversion, the ffmpeg encode of a video through
imageio-ffmpeg's binary, an image's PNG, JPEG or WebP), on real torch and imageio.

What is stood in: the model, the pipeline's forward (text encoding, denoising, VAE decode). Its
stand-in renders the request with harness/peers/render (the row's own Task, deterministic) and
returns what SGLang's DecodingStage returns, an OutputBatch whose output is the decoded frames,
float [B, 3, T, H, W] in [0, 1]; each Task step advances SGLang's own ReportingTqdm, as the
denoising loop's progress bar does. The hop to the scheduler process (a zmq socket:
AsyncSchedulerClient._forward_one) is a pickled round trip to one scheduler thread in this
process, with no GPU worker processes behind it.

Usage: python sglang_peer.py --port P --model-path HF_ID --served-model-name ROW --row ROW
       --render RENDER --work DIR --dit-precision PRECISION
"""
import argparse
import asyncio
import concurrent.futures
import json
import os
import pickle
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standins  # noqa: E402

os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub here: the checkpoint is on disk
standins.install()

import torch  # noqa: E402
import uvicorn  # noqa: E402
import zmq  # noqa: E402

from sglang.multimodal_gen.runtime import scheduler_client  # noqa: E402
from sglang.multimodal_gen.runtime.entrypoints.http_server import create_app  # noqa: E402
from sglang.multimodal_gen.runtime.managers import progress_reporter  # noqa: E402
from sglang.multimodal_gen.runtime.managers.cpu_worker import CPUWorker  # noqa: E402
from sglang.multimodal_gen.runtime.managers.gpu_worker import GPUWorker  # noqa: E402
from sglang.multimodal_gen.runtime.managers.scheduler import Scheduler  # noqa: E402
from sglang.multimodal_gen.runtime.pipelines_core.schedule_batch import OutputBatch  # noqa: E402
from sglang.multimodal_gen.runtime.pipelines_core.stages.base import PipelineStage  # noqa: E402
from sglang.multimodal_gen.runtime.platforms import current_platform  # noqa: E402
from sglang.multimodal_gen.runtime.realtime.session import RealtimeSessionCache  # noqa: E402
from sglang.multimodal_gen.runtime.server_args import ServerArgs, set_global_server_args  # noqa: E402

import render  # noqa: E402


# model_index.json of the checkpoints the rows stand for: SGLang picks its pipeline config and
# sampling defaults from it, as from a downloaded checkpoint (no weights are read: the model is
# stood in).
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


class Pipeline:
    """The model: the pipeline's forward, its frames rendered by the row's Task."""

    def __init__(self, renderer):
        self.renderer = renderer

    def forward(self, req, server_args):
        sp = req.sampling_params
        fields = {"prompt": sp.prompt, "size": f"{sp.width}x{sp.height}", "seed": str(sp.seed)}
        if sp.num_inference_steps is not None:
            fields["num_inference_steps"] = str(sp.num_inference_steps)
        if sp.guidance_scale is not None:
            fields["guidance_scale"] = render.number(sp.guidance_scale)
        images = sp.image_path if isinstance(sp.image_path, list) else [p for p in [sp.image_path] if p]
        if not images:
            fields["num_frames"], fields["fps"] = str(sp.num_frames), str(sp.fps)
        # The denoising stage's progress bar (PipelineStage.progress_bar: SGLang's ReportingTqdm
        # when the request reports progress), one update per Task step.
        bar = {}

        def step(done, total):
            if "bar" not in bar:
                bar["bar"] = PipelineStage.progress_bar(types.SimpleNamespace(_progress_range=(0.0, 1.0)), total=total, batch=req)
            bar["bar"].update(done - bar["bar"].n)

        try:
            out = self.renderer.run(fields, images[0] if images else None, step)
        finally:
            if "bar" in bar:
                bar["bar"].close()
        if out.error:
            raise RuntimeError(out.error)
        frames = torch.from_numpy(render.frames(out)).permute(3, 0, 1, 2)  # [3, T, H, W] uint8
        # The VAE's decode after DecodingStage's _to_unit_range: float in [0, 1], [B, 3, T, H, W].
        return OutputBatch(output=(frames.to(torch.float32) / 255).unsqueeze(0), metrics=req.metrics)


def scheduler(server_args, pipeline):
    """SGLang's Scheduler and its worker, built without a device or a model load."""
    worker_cls = CPUWorker if current_platform.is_cpu() else GPUWorker
    worker = object.__new__(worker_cls)
    # GPUWorker.__init__'s state, less the device, the distributed groups and the model.
    worker.local_rank = worker.rank = 0
    worker.is_output_rank = True
    worker.server_args = server_args
    worker.metrics = None
    worker.pipeline = pipeline
    worker._load_peak_reserved_mb = worker._load_peak_allocated_mb = 0.0
    worker._runtime_peak_reserved_mb = worker._runtime_peak_allocated_mb = worker._warmup_peak_reserved_mb = 0.0
    worker._release_warmup_pool_before_serving = False
    worker._realtime_sessions = RealtimeSessionCache(max_sessions=1)
    worker.memory_occupation = None
    worker._async_output_save = False
    worker._deferred_finalize = None
    worker._deferred_save_stream = None
    worker.defer_cache_release = False
    worker._cache_release_due = None
    worker._auto_residency_warmup_records = []
    s = object.__new__(Scheduler)
    s.server_args, s.worker, s.metrics = server_args, worker, None
    s._async_output_save = False
    s.request_handlers = {}  # generation only: others answer the scheduler's own "Unknown request type"
    return s


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
    sched = scheduler(server_args, Pipeline(render.Renderer(args.render, args.row, os.path.join(args.work, "render"))))
    # The scheduler process's event loop: one request at a time, its progress socket its own.
    loop_thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="scheduler")

    def dispatch(payload):
        if progress_reporter.get_progress_reporter() is None and server_args.progress_endpoint is not None:
            progress_reporter.init_progress_reporter(zmq.Context.instance(), server_args.progress_endpoint)
        out = sched._dispatch_single_request(pickle.loads(payload))
        return pickle.dumps(out)

    async def forward_one(self, endpoint, batch, timeout_ms):
        # send_pyobj and recv_pyobj: the request and the reply cross the hop pickled.
        reply = await asyncio.get_running_loop().run_in_executor(loop_thread, dispatch, pickle.dumps(batch))
        return pickle.loads(reply)

    scheduler_client.AsyncSchedulerClient._forward_one = forward_one
    set_global_server_args(server_args)
    app = create_app(server_args)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", loop="asyncio")


if __name__ == "__main__":
    main()
