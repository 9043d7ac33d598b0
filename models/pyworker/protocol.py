"""The JSON-lines protocol of docs/WORKER.md around a family object: the stdin reader thread
(run ops queued, cancel ops marking ids, EOF cancelling what is left), the ready / fatal /
progress / frames / result / error lines on stdout, the run loop, the followers of a layout of
several ranks, and main().

The family object has:
  load()                  build the model (before "ready"); an exception becomes "fatal"
  precision               sent in "ready" (read after load)
  run(settings, reference_path, progress_cb, cancelled) -> Output
                          one job: progress_cb(done, total) reports steps, cancelled() says
                          whether the job was cancelled; raise JobError or Cancelled to end it
  ready_info()            optional: extra fields of the "ready" line
  is_oom(exc), recover()  optional: an exception for which is_oom is true becomes
                          "out_of_memory" (after recover()); any other one "pipeline_error"
(backend.PipelineFamily is one, for a diffusers pipeline.) Nothing here imports torch."""

import gc
import json
import os
import queue
import sys
import threading
import time

from . import ranks
from .frames import FrameStream, Tail, rgb24, video_shape, write_frames
from .job import Cancelled, JobError, reference_of


# --------------------------------------------------------------------------------------------
# Protocol


PAUSE_LOG_MS = 10.0  # a job's collections are logged from this much pause on, or any full one


def settle_heap():
    """After load: one full collection, then gc.freeze(), so the objects the load made (modules,
    parameters' wrappers, compiled graphs: most of a worker's heap) are never scanned again.
    Otherwise a full collection can land inside a Task and stall its kernel launches for as long
    as it takes to walk that heap."""
    gc.collect()
    gc.freeze()


class Pauses:
    """The garbage collector's pauses, through gc.callbacks: take() returns (collections, full
    collections, ms) since the last take(). The worker logs a job's, so a slow Task can be
    told apart from a collection inside it."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.count = self.full = 0
        self.ms = 0.0
        self.began = None
        gc.callbacks.append(self.callback)

    def callback(self, phase, info):
        if phase == "start":
            self.began = self.clock()
        elif self.began is not None:
            self.ms += (self.clock() - self.began) * 1000.0
            self.count += 1
            self.full += info.get("generation") == 2
            self.began = None

    def take(self):
        got = (self.count, self.full, self.ms)
        self.count = self.full = 0
        self.ms = 0.0
        return got

    def close(self):
        gc.callbacks.remove(self.callback)


def sticky_device_error(exc):
    """Whether exc is a CUDA error that poisons the process's context (an illegal address, a
    device-side assert, a launch failure: every later call fails too), as opposed to an out of
    memory, after which the worker recovers. torch raises them as AcceleratorError (RuntimeError
    before 2.9) with "CUDA error:" in the message."""
    msg = str(exc)
    return type(exc).__name__ == "AcceleratorError" or ("CUDA error:" in msg and "out of memory" not in msg)


class Worker:
    """The JSON-lines loop of docs/WORKER.md around a family object (see the module doc)."""

    def __init__(self, out, family, log):
        self.out = out
        self.family = family
        self.log = log
        self.group = None  # ranks.Group when the Task spans several GPUs (rank 0)
        self.out_lock = threading.Lock()
        self.state = threading.Lock()
        self.jobs = queue.Queue()
        self.queued = set()  # ids read but not started
        self.current = None  # id of the running job
        self.cancelled = set()
        self.pauses = None  # Pauses, from "ready" on
        self.sticky = None  # the device error after which this process must not serve again

    # ---- output

    def emit(self, obj):
        line = json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n"
        with self.out_lock:
            try:
                self.out.write(line)
                self.out.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the server is gone; stdin EOF will end us

    def error(self, job_id, code, message, param=None):
        ev = {"event": "error", "id": job_id, "code": code, "message": message}
        if param:
            ev["param"] = param
        self.emit(ev)

    # ---- input

    def read(self, inp):
        """Reader thread: runs go to the queue, cancels mark ids; EOF drops what is left."""
        try:
            for raw in inp:
                if isinstance(raw, bytes):
                    raw = raw.decode("utf-8", "replace")
                raw = raw.strip()
                if not raw:
                    continue
                try:
                    msg = json.loads(raw)
                except ValueError:
                    self.log("ignoring a line that is not JSON: %.200s" % raw)
                    continue
                if not isinstance(msg, dict):
                    continue
                op, job_id = msg.get("op"), msg.get("id")
                if not isinstance(job_id, str) or not job_id:
                    if op in ("run", "cancel"):
                        self.log("ignoring %s without an id" % op)
                    continue
                if op == "run":
                    with self.state:
                        self.queued.add(job_id)
                    self.jobs.put(msg)
                elif op == "cancel":
                    with self.state:
                        if job_id in self.queued or job_id == self.current:
                            self.cancelled.add(job_id)
                        # else: not running (it may have just ended): ignored
        except Exception as e:  # a broken stdin is EOF
            self.log("stdin: %s" % e)
        finally:
            with self.state:
                self.cancelled.update(self.queued)
                if self.current is not None:
                    self.cancelled.add(self.current)
            self.jobs.put(None)

    def is_cancelled(self, job_id):
        with self.state:
            return job_id in self.cancelled

    # ---- main loop

    def serve(self, inp):
        g = self.group
        err = None
        try:
            self.family.load()
        except Exception as e:
            err = "%s: %s" % (type(e).__name__, e)
            self.log("load failed: %s" % err)
        if g is not None:
            errs = g.gather(err)
            err = next(("rank %d: %s" % (r, e) for r, e in enumerate(errs) if e), None)
        if err:
            self.emit({"event": "fatal", "message": err})
            return 1
        settle_heap()
        self.pauses = Pauses()
        ready = {"event": "ready", "precision": self.family.precision, "pid": os.getpid()}
        info = getattr(self.family, "ready_info", None)
        if info:
            ready.update(info())
        if g is not None:
            ready["ranks"] = g.world
        self.emit(ready)
        t = threading.Thread(target=self.read, args=(inp,), name="stdin", daemon=True)
        t.start()
        while True:
            msg = self.jobs.get()
            if msg is None:
                if g is not None:
                    g.share(None)  # tells the other ranks to stop
                    g.close()
                return 0
            job_id = msg["id"]
            with self.state:
                self.queued.discard(job_id)
                self.current = job_id
            self.pauses.take()
            try:
                ok = self.run(job_id, msg)
            finally:
                with self.state:
                    self.current = None
                    self.cancelled.discard(job_id)
            n, full, ms = self.pauses.take()
            if full or ms >= PAUSE_LOG_MS:
                self.log("job %s: %d garbage collections (%d full) paused it for %.1f ms" % (job_id, n, full, ms))
            if not ok and g is not None:
                # A collective may be half-done on some rank: the group cannot go on.
                self.log("ending the group after job %s failed mid-call; the server restarts it" % job_id)
                return 1
            if not ok and self.sticky:
                self.log("exiting after job %s: the device reported an error that stays with this process (%s); "
                         "the server restarts the worker" % (job_id, self.sticky))
                return 1

    def is_cancelled_everywhere(self, job_id):
        """cancelled() for a job: on several ranks, rank 0's answer shared with all of them."""
        flag = self.is_cancelled(job_id)
        return flag if self.group is None else self.group.agree(flag)

    def produce(self, job_id, msg, output, reference, progress):
        """Runs the family and leaves the job's frames in output: streamed while the Task
        made them where the family can, the rest after. Returns (output, shape), and logs the
        worker's share of the job's hand-over: its time outside the Task call, around it (the
        settings, the reference, bookkeeping) and after it (frames to bytes, written)."""
        f = self.family
        stream = None
        more = {}
        if getattr(f, "streams", False):
            more["stream"] = stream = FrameStream(output, lambda n, w, h: self.emit(
                {"event": "frames", "id": job_id, "frames": n, "width": w, "height": h}))
        try:
            began = time.perf_counter()
            out = f.run(msg.get("settings"), reference, progress, lambda: self.is_cancelled_everywhere(job_id), **more)
            ran = time.perf_counter()
            shape = frames, height, width, _ = video_shape(out.video)
            data = rgb24(out.video)
            streamed = stream.finish() if stream is not None else 0
            if streamed and not isinstance(out.video, Tail):
                raise JobError("stream_mismatch", "%d frames were streamed but the output was handed over whole" % streamed)
            n = write_frames(output, data, append=streamed > 0) + streamed * height * width * 3
            if n != frames * height * width * 3:
                raise JobError("bad_pipeline_output", "wrote %d bytes, expected %d" % (n, frames * height * width * 3))
            self.log("job %s: outside the Task call %.1f ms around it, %.1f ms after it (%d frames streamed)" % (
                job_id, max(0.0, (ran - began) * 1000.0 - out.task_wall_ms), (time.perf_counter() - ran) * 1000.0, streamed))
            compiled, recorded = out.compiled
            if compiled or recorded:
                self.log("job %s: during the Task the engine compiled %d new graph(s) and recorded %d CUDA graph(s) "
                         "(a shape the warm-up did not have): its time includes that" % (job_id, compiled, recorded))
            return out, shape
        finally:
            if stream is not None:
                stream.close()  # no frames event after the job's answer, whatever it is

    def run(self, job_id, msg):
        """One job, ending in a result or error event. False when it failed in a way that may
        have left the pipeline (or, on several ranks, a collective) in an unknown state."""
        f = self.family
        output = msg.get("output")

        def progress(done, total):
            self.emit({"event": "progress", "id": job_id, "done": done, "total": total})

        try:
            if not isinstance(output, str) or not output:
                raise JobError("invalid_request", "run has no output path")
            reference = reference_of(msg)
            if self.group is not None:
                self.group.share(msg)  # the other ranks run it beside this one
            out, (frames, height, width, _) = self.produce(job_id, msg, output, reference, progress)
        except Cancelled as c:
            self.error(job_id, "cancelled", str(c))
            return True
        except JobError as e:
            self.error(job_id, e.code, e.message, e.param)
            return True
        except Exception as e:
            dead = self.group.dead() if self.group is not None else []
            if dead:
                # Not this job's fault: a rank died under it. No answer; the server sees the
                # group end and reports the job worker_crashed with these lines.
                for r, status in dead:
                    self.log("job %s: rank %d exited with status %s (%s: %s): ending the group" % (
                        job_id, r, status, type(e).__name__, e))
                return False
            is_oom = getattr(f, "is_oom", None)
            if is_oom and is_oom(e):
                if self.group is None:
                    f.recover()
                self.error(job_id, "out_of_memory", str(e)[:2000])
            else:
                self.log("job %s failed: %s: %s" % (job_id, type(e).__name__, e))
                self.error(job_id, "pipeline_error", "%s: %s" % (type(e).__name__, str(e)[:2000]))
                if sticky_device_error(e):
                    self.sticky = "%s: %s" % (type(e).__name__, str(e)[:200])
            return False
        self.emit({
            "event": "result",
            "id": job_id,
            "frames": frames,
            "width": width,
            "height": height,
            "actual": out.actual,
            "task_wall_ms": round(out.task_wall_ms, 3),
            "phases_ms": out.phases_ms,
            "peak_memory_mb": round(out.peak_memory_mb, 1),
        })
        return True


# --------------------------------------------------------------------------------------------
# Entry point helpers


def layout_arg(value):
    """argparse type of --layout: a valid layout string (ranks.parse_layout)."""
    import argparse

    try:
        ranks.parse_layout(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))
    return value


rank_device = ranks.rank_device


def resolve_bundle(args, env):
    """--bundle, else $MEDIAQUAL_BUNDLE, else $MEDIAQUAL_BUNDLES/<--bundle-name>, else None."""
    if args.bundle:
        return args.bundle
    if env.get("MEDIAQUAL_BUNDLE"):
        return env["MEDIAQUAL_BUNDLE"]
    if env.get("MEDIAQUAL_BUNDLES") and args.bundle_name:
        return os.path.join(env["MEDIAQUAL_BUNDLES"], args.bundle_name)
    return None


def main(make_worker, layout=None, cuda=True):
    """Serve stdin with make_worker(protocol_out) and exit with its status. A layout of
    several ranks (ranks.py) starts or joins the group first (NCCL between GPUs when cuda,
    else gloo); ranks other than 0 follow rank 0 instead of serving.

    stdout is the protocol: keep a private handle on it and point fd 1 (and sys.stdout) at
    stderr, so that a stray print or a C library writing to fd 1 cannot corrupt it."""
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _, world = ranks.parse_layout(layout)
    worker = make_worker(proto)
    if world == 1:
        rc = worker.serve(sys.stdin.buffer)
    else:
        group = ranks.Group(ranks.rank_from_env(), world, worker.log)
        if group.rank == 0:
            group.spawn()
        group.join(cuda)
        if group.rank == 0:
            worker.group = group
            rc = worker.serve(sys.stdin.buffer)
        else:
            rc = follow(worker.family, group, worker.log)
    try:
        proto.flush()
    except OSError:
        pass
    # Skip interpreter teardown (CUDA contexts, daemon threads): the job is done or dropped.
    sys.stderr.flush()
    os._exit(rc)


def follow(family, group, log):
    """Ranks 1..N-1: load, then run every job rank 0 shares until it shares None. Progress and
    frames are rank 0's; a failure that is not shared by every rank ends this process."""
    err = None
    try:
        family.load()
    except Exception as e:
        err = "%s: %s" % (type(e).__name__, e)
        log("load failed: %s" % err)
    if any(group.gather(err)):
        return 1
    settle_heap()
    while True:
        msg = group.share()
        if msg is None:
            return 0
        try:
            family.run(msg.get("settings"), reference_of(msg), lambda done, total: None, group.agree)
        except (Cancelled, JobError):
            pass  # every rank raised it at the same point; rank 0 reports it
        except Exception as e:
            log("job %s failed on rank %d: %s: %s" % (msg.get("id"), group.rank, type(e).__name__, e))
            return 1
