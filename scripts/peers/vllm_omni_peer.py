"""vLLM-Omni's released API server (vllm-omni 0.30.0 on vllm 0.30.0) serving one mediaqual row.

Everything in front of the engine is vLLM-Omni's own: its CLI (`vllm serve MODEL --omni`),
omni_run_server, vLLM's app and exception handlers, its routers, stores, storage and response
building. Only build_async_omni, which starts the diffusion engine (AsyncOmni and its stage
processes), is replaced: it yields an engine whose generate() reports the request started (the
lifecycle output AsyncOmni emits when the diffusion worker takes it), renders it with
harness/peers/render and yields the result as AsyncOmni does (OmniRequestOutput with the encoded
MP4, or the image), or raises the stage's error.

Usage: python vllm_omni_peer.py --port P --served-model-name ROW --row ROW --workload W
       --render RENDER --work DIR      (W: text_to_video or image_edit)
"""
import argparse
import contextlib
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standins  # noqa: E402

standins.install(["openai_harmony", "cpuinfo", "llguidance", "watchfiles",
                  "ijson", "mistral_common"])

from PIL import Image  # noqa: E402

from vllm_omni.diffusion.data import DIFFUSION_REQUEST_LIFECYCLE_KEY, DIFFUSION_REQUEST_STARTED  # noqa: E402
from vllm_omni.entrypoints.cli.main import main as vllm_main  # noqa: E402
from vllm_omni.entrypoints.openai import api_server  # noqa: E402
from vllm_omni.outputs import OmniRequestOutput  # noqa: E402

import render  # noqa: E402


class Engine:
    """The diffusion engine's client, as AsyncOmni is to the API server, for one stage."""

    def __init__(self, media, output_type):
        self.media = media  # renders the output (render.Renderer)
        self.output_type = output_type
        self.stage_configs = [{"stage_id": 0, "stage_type": "diffusion", "final_output": True,
                               "final_output_type": output_type}]
        self.default_sampling_params_list = []
        self.endpoint_restrictions = ()
        # AsyncOmni's, for pure diffusion (no comprehension stage).
        self.vllm_config = self.model_config = self.input_processor = self.io_processor = self.renderer = None

    async def get_vllm_config(self):
        return None  # pure diffusion: no language-model stage

    async def get_supported_tasks(self):
        return ("generate",)

    async def check_health(self):
        return None

    async def abort(self, request_id, timeout=None):
        return None

    async def generate(self, prompt, request_id, sampling_params_list, **kwargs):
        sp = sampling_params_list[0]
        if getattr(sp, "emit_request_lifecycle", False):
            yield OmniRequestOutput.from_diffusion(request_id=request_id, images=[], finished=False,
                                                   custom_output={DIFFUSION_REQUEST_LIFECYCLE_KEY: DIFFUSION_REQUEST_STARTED})
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
        reference = None
        data = prompt.get("multi_modal_data") if isinstance(prompt, dict) else None
        if data and data.get("image") is not None:
            image = data["image"][0] if isinstance(data["image"], list) else data["image"]
            reference = os.path.join(self.media.work, f"{request_id}-reference.png")
            image.save(reference, format="PNG")
        try:
            out = await self.media.run(fields, reference, lambda done, total: None)
        finally:
            if reference:
                os.remove(reference)
        if out.error:
            raise RuntimeError(out.error)  # DiffusionEngine raises a worker's error so
        with open(out.path, "rb") as f:
            produced = f.read()
        os.remove(out.path)
        if video:
            images = [produced]  # pre-encoded MP4, as a worker that encodes sends it
        else:
            images = [Image.open(io.BytesIO(produced)).convert("RGB")]
        yield OmniRequestOutput.from_diffusion(request_id=request_id, images=images, final_output_type=self.output_type,
                                               stage_durations={"diffusion": out.task_ms / 1000})


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
    engine = Engine(renderer, "video" if args.workload == "text_to_video" else "image")

    @contextlib.asynccontextmanager
    async def build_async_omni(cli_args, **kwargs):
        yield engine

    api_server.build_async_omni = build_async_omni
    os.environ.setdefault("VLLM_OMNI_STORAGE_PATH", os.path.join(args.work, "storage"))
    sys.argv = ["vllm", "serve", args.model, "--omni", "--host", "127.0.0.1", "--port", str(args.port),
                "--served-model-name", args.served_model_name]
    vllm_main()


if __name__ == "__main__":
    main()
