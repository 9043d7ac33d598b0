"""A job's frames: the rgb24 conversion of a Task's output, and the FrameStream that writes
frames to the job's output file while the Task still makes them (docs/WORKER.md, "frames").
numpy is imported lazily, torch never."""

import math
import queue
import threading

from .job import JobError


# --------------------------------------------------------------------------------------------
# Frames -> rgb24


def quantize(x):
    """One channel value in [0,1] -> 0..255: round(clip(x, 0, 1) * 255), round half to even
    (as numpy.round)."""
    if not math.isfinite(x):
        raise JobError("non_finite_output", "the pipeline produced non-finite values (NaN/Inf)")
    return int(round(min(max(x, 0.0), 1.0) * 255.0))


def video_shape(video):
    """(frames, height, width, channels) of an (F, H, W, C) array or nested list."""
    if hasattr(video, "shape"):
        return tuple(int(d) for d in video.shape)
    shape = []
    v = video
    while isinstance(v, (list, tuple)):
        shape.append(len(v))
        if not v:
            break
        v = v[0]
    return tuple(shape)


def rgb24(video):
    """Frames (F, H, W, 3) of floats in [0,1] -> raw rgb24 bytes-like (row-major, frame after
    frame). A numpy array takes the vectorised path (numpy imported here, lazily); nested lists
    take the pure-Python path, which defines the same arithmetic."""
    shape = video_shape(video)
    if len(shape) != 4 or shape[3] != 3:
        raise JobError("bad_pipeline_output", "expected frames of shape (F, H, W, 3), got %s" % (shape,))
    if isinstance(video, Tail):
        return rgb24(video.rest) if len(video.rest) else b""
    if hasattr(video, "shape"):
        import numpy as np

        arr = np.asarray(video)
        if arr.dtype == np.uint8:
            return np.ascontiguousarray(arr)
        if not np.isfinite(arr).all():
            raise JobError("non_finite_output", "the pipeline produced non-finite values (NaN/Inf)")
        out = np.round(np.clip(arr, 0.0, 1.0) * 255.0).astype(np.uint8)
        return np.ascontiguousarray(out)
    buf = bytearray()
    for frame in video:
        for row in frame:
            for px in row:
                buf.append(quantize(px[0]))
                buf.append(quantize(px[1]))
                buf.append(quantize(px[2]))
    return bytes(buf)


def write_frames(path, data, append=False):
    """Overwrite (or append to) path with data; return the number of bytes written."""
    n = memoryview(data).nbytes
    with open(path, "ab" if append else "wb") as f:
        f.write(data)
    return n


class Tail:
    """A Task's output whose first frames already went out through its FrameStream: the whole
    clip's shape (F, H, W, 3), and the frames after the streamed ones as uint8 rows."""

    def __init__(self, shape, rest):
        self.shape = tuple(shape)
        self.rest = rest


class FrameStream:
    """A job's frames written to its output file while the Task still makes them, each run of
    frames announced with a "frames" event (docs/WORKER.md), so the server's encoder can take
    them before the Task returns. A backend pushes uint8 (F, H, W, 3) chunks in order; one
    thread writes them, so the pipeline never waits for the disk. On a GPU it waits for each
    chunk's asynchronous copy to the host (pinned memory, an event per chunk), so the decode
    is never stalled by a synchronising copy."""

    def __init__(self, path, announce):
        self.path = path
        self.announce = announce  # announce(frames, width, height)
        self.frames = 0  # frames pushed
        self.written = 0  # frames written and announced
        self.kept = []  # the pushed chunks as the backend made them (on its device)
        self.size = None  # (height, width)
        self.queue = None
        self.thread = None
        self.failure = None

    def push(self, chunk, host, ready=None):
        """chunk: the (F, H, W, 3) uint8 frames where they were made (kept for the check at the
        end); host: the same bytes in host memory, valid once ready() returns (or now)."""
        f, h, w = (int(d) for d in chunk.shape[:3])
        if self.size is not None and self.size != (h, w):
            raise JobError("bad_pipeline_output", "streamed frames changed size from %dx%d to %dx%d" % (
                self.size[1], self.size[0], w, h))
        self.size = (h, w)
        self.kept.append(chunk)
        self.frames += f
        if self.thread is None:
            self.queue = queue.Queue()
            self.thread = threading.Thread(target=self._write, name="frames", daemon=True)
            self.thread.start()
        self.queue.put((host, ready, self.frames))

    def _write(self):
        out = None
        while True:
            item = self.queue.get()
            if item is None:
                break
            if self.failure is not None:
                continue  # drain
            host, ready, frames = item
            try:
                if out is None:
                    out = open(self.path, "wb")
                if ready is not None:
                    ready()
                out.write(memoryview(host))
                out.flush()
                self.written = frames
                self.announce(frames, self.size[1], self.size[0])
            except Exception as e:  # surfaced by finish()
                self.failure = e
        if out is not None:
            out.close()

    def close(self):
        """Ends the writer (after finish, or after a failure) without raising."""
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()
            self.thread = None

    def finish(self):
        """Waits until every pushed frame is written and announced; returns their count."""
        self.close()
        if self.failure is not None:
            raise JobError("bad_pipeline_output", "writing streamed frames: %s" % self.failure)
        return self.written
