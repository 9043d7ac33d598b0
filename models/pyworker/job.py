"""What a job of a Python mediaserve worker is (docs/WORKER.md), without torch: its outcomes
(JobError, Cancelled, Output), the family-independent checks of its settings (spec.Settings as
sent in a run op), its reference image, and the workers' log lines."""

import math
import os
import sys

from . import ranks

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def logger(name):
    """A log function writing 'name: msg' lines to stderr (the server copies stderr to its log)."""

    rank = os.environ.get(ranks.RANK_ENV)
    if rank:
        name = "%s[rank %s]" % (name, rank)

    def log(msg):
        sys.stderr.write("%s: %s\n" % (name, msg))
        sys.stderr.flush()

    return log


# --------------------------------------------------------------------------------------------
# Job outcomes


class JobError(Exception):
    """A job failure reported as an error event with a stable code."""

    def __init__(self, code, message, param=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param


class Cancelled(Exception):
    """Raised from a step callback to stop the pipeline between steps, and to end a job with an
    error event of code "cancelled"."""

    def __init__(self, step, message=None):
        super().__init__(message or "cancelled at step %d" % step)
        self.step = step


class Output:
    """What a family's run() produced: video is (frames, height, width, 3) floats in [0,1] (a
    numpy array or nested lists; an image is one frame); actual is spec.Actual."""

    def __init__(self, video, actual, task_wall_ms, peak_memory_mb, phases_ms=None, compiled=(0, 0)):
        self.video = video
        self.actual = actual
        self.task_wall_ms = task_wall_ms
        self.peak_memory_mb = peak_memory_mb
        self.phases_ms = phases_ms or {}
        # (torch.compile graphs made, CUDA graphs recorded) during the call: their time is in the Task
        self.compiled = compiled


# --------------------------------------------------------------------------------------------
# Settings (spec.Settings as sent in a run op): the family-independent field checks


def parse_size(value):
    """'WxH' with positive decimal integers -> (w, h)."""
    if not isinstance(value, str):
        raise JobError("invalid_request", "size %r is not a 'WxH' string" % (value,), "size")
    w, sep, h = value.partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or not w.isascii() or not h.isascii():
        raise JobError("invalid_request", "size %r is not of the form WxH" % value, "size")
    wi, hi = int(w), int(h)
    if wi <= 0 or hi <= 0:
        raise JobError("invalid_request", "size %r has a zero dimension" % value, "size")
    return wi, hi


def check_size_multiple(width, height, size_multiple):
    """Refuse a size that is not a multiple of (height, width) granularity: diffusers would
    silently crop it."""
    mh, mw = size_multiple
    if height % mh or width % mw:
        raise JobError(
            "unsupported_value",
            "size %dx%d is not a multiple of %dx%d (diffusers would silently crop it to %dx%d)"
            % (width, height, mw, mh, width // mw * mw, height // mh * mh),
            "size",
        )


def int_setting(settings, key, minimum=None, lo=INT64_MIN, hi=INT64_MAX):
    if key not in settings:
        raise JobError("invalid_request", "settings lack %s" % key, key)
    v = settings[key]
    if isinstance(v, bool) or not isinstance(v, int):
        # JSON numbers like 17.0 are not integers here: the server sends integers.
        raise JobError("invalid_request", "%s must be an integer, got %r" % (key, v), key)
    if v < lo or v > hi:
        raise JobError("invalid_request", "%s %d is out of range" % (key, v), key)
    if minimum is not None and v < minimum:
        raise JobError("unsupported_value", "%s must be at least %d, got %d" % (key, minimum, v), key)
    return v


def settings_object(settings):
    if not isinstance(settings, dict):
        raise JobError("invalid_request", "settings must be an object")
    return settings


def prompt_setting(settings):
    prompt = settings.get("prompt")
    if not isinstance(prompt, str):
        raise JobError("invalid_request", "settings lack a prompt string", "prompt")
    return prompt


def negative_setting(settings, default):
    """negative_prompt; omitted (or null, or empty: the server omits an empty one) -> default."""
    negative = settings.get("negative_prompt")
    if negative is None or negative == "":
        return default
    if not isinstance(negative, str):
        raise JobError("invalid_request", "negative_prompt must be a string", "negative_prompt")
    return negative


def guidance_setting(settings):
    guidance = settings.get("guidance")
    if isinstance(guidance, bool) or not isinstance(guidance, (int, float)) or not math.isfinite(guidance):
        raise JobError("invalid_request", "guidance must be a finite number, got %r" % (guidance,), "guidance")
    return float(guidance)


# --------------------------------------------------------------------------------------------
# The reference image of an edit


def reference_of(msg):
    """A run op's reference: None, or the path of the file as it was uploaded (docs/WORKER.md)."""
    ref = msg.get("reference")
    if ref is None:
        return None
    if not isinstance(ref, str) or not ref:
        raise JobError("invalid_request", "run's reference is not a path")
    return ref


def open_reference(ref):
    """The uploaded reference as an RGB Pillow image, decoded by its content (PNG, JPEG,
    WebP) by Pillow. OSError when it cannot be read or decoded."""
    from PIL import Image

    with Image.open(ref) as im:
        im.load()
        # An RGB upload (the common case) as decoded: convert would copy it (about 4 ms for 1024²).
        return im if im.mode == "RGB" else im.convert("RGB")
