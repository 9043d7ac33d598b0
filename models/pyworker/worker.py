"""The family-independent half of a Python mediaserve worker (docs/WORKER.md): the names a
family adapter (models/wan/adapter.py, models/qwenimage/adapter.py, models/minimax/adapter.py)
uses, each from the module that does that job:

  job.py       a job's outcomes (JobError, Cancelled, Output), its settings' checks, its
               reference image, the log lines
  frames.py    frames to rgb24, and the FrameStream that writes them while the Task runs
  backend.py   PipelineFamily (a diffusers pipeline as a family) and TorchBackend (the device
               half: set-up, engines, layouts, parity before ready, memory)
  protocol.py  the JSON-lines protocol loop (Worker), the other ranks' loop (follow), main()
  ranks.py, parallel.py, parity.py, fused.py, graphs.py: several GPUs, layouts, parity, the
               fused kernels and CUDA graphs

Nothing here imports torch, numpy or Pillow at module level: the mapping, the protocol and the
rgb24 conversion are testable without them.
"""

from .backend import ENGINES, PipelineFamily, TorchBackend, phases_ms, require_bundle
from .frames import FrameStream, Tail, quantize, rgb24, video_shape, write_frames
from .job import (
    Cancelled, JobError, Output, check_size_multiple, guidance_setting, int_setting, logger, negative_setting,
    open_reference, parse_size, prompt_setting, reference_of, settings_object,
)
from .protocol import (
    PAUSE_LOG_MS, Pauses, Worker, follow, layout_arg, main, rank_device, resolve_bundle, settle_heap,
    sticky_device_error,
)

__all__ = [
    "ENGINES", "PipelineFamily", "TorchBackend", "phases_ms", "require_bundle",
    "FrameStream", "Tail", "quantize", "rgb24", "video_shape", "write_frames",
    "Cancelled", "JobError", "Output", "check_size_multiple", "guidance_setting", "int_setting", "logger",
    "negative_setting", "open_reference", "parse_size", "prompt_setting", "reference_of", "settings_object",
    "PAUSE_LOG_MS", "Pauses", "Worker", "follow", "layout_arg", "main", "rank_device", "resolve_bundle",
    "settle_heap", "sticky_device_error",
]
