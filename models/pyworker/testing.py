"""Test scaffolding shared by every family's adapter tests: a family's Worker runs in a thread
on in-memory stdin/stdout, so the docs/WORKER.md protocol is tested without torch or a GPU."""

import io
import json
import os
import queue
import tempfile
import threading
import time
import unittest


class PipeIn:
    """A blocking line source for the worker's reader thread (stdin)."""

    def __init__(self):
        self.q = queue.Queue()

    def send(self, obj):
        self.q.put((json.dumps(obj) if not isinstance(obj, str) else obj) + "\n")

    def close(self):
        self.q.put(None)

    def __iter__(self):
        while True:
            line = self.q.get()
            if line is None:
                return
            yield line.encode()


class LineOut(io.TextIOBase):
    """Collects the worker's stdout lines; next_event waits for one."""

    def __init__(self):
        self.buf = ""
        self.lines = queue.Queue()
        self.all = []

    def write(self, s):
        self.buf += s
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            ev = json.loads(line)  # every stdout line must be JSON
            self.all.append(ev)
            self.lines.put(ev)
        return len(s)

    def flush(self):
        pass

    def next_event(self, timeout=5):
        return self.lines.get(timeout=timeout)


class WorkerTestCase(unittest.TestCase):
    """Base of a family's protocol tests. Subclasses set adapter (the family's adapter module),
    fake_pipe (a fake pipeline class) and fake_backend (the backend class wrapping it)."""

    adapter = None
    fake_pipe = None
    fake_backend = None

    def start(self, pipe=None, load=None, clock=time.perf_counter):
        self.pipe = pipe or self.fake_pipe()
        self.backend = self.fake_backend(self.pipe)
        self.inp, self.out = PipeIn(), LineOut()
        self.worker = self.adapter.Worker(self.out, load or (lambda: self.backend), clock=clock)
        self.rc = []
        self.thread = threading.Thread(target=lambda: self.rc.append(self.worker.serve(self.inp)), daemon=True)
        self.thread.start()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name

    def stop(self):
        self.inp.close()
        self.thread.join(5)
        self.assertFalse(self.thread.is_alive(), "worker did not exit on stdin EOF")
        self.assertEqual(self.rc, [0])

    def path(self, name, create=True):
        p = os.path.join(self.tmp, name)
        if create:
            open(p, "wb").close()  # the server creates the output, empty
        return p

    def until(self, event, job_id):
        """Waits for job_id's event, collecting its progress events on the way."""
        progress = []
        while True:
            ev = self.out.next_event()
            if ev.get("id") != job_id:
                continue
            if ev["event"] == "progress":
                progress.append(ev)
                continue
            self.assertEqual(ev["event"], event, ev)
            return ev, progress


class FakeBackend:
    """The backend half of a worker (models/pyworker/worker.py) without torch: it runs the
    family's fake pipeline and records the calls around it. A family subclasses it with its
    own class attributes (precision, size multiple, ...)."""

    precision = "bf16"

    def __init__(self, pipe):
        self.pipe = pipe
        self.events = []

    def generator(self, seed):
        return ("generator", seed)

    def call(self, kwargs):
        self.events.append("call")
        return self.pipe(**kwargs)

    def synchronize(self):
        self.events.append("sync")

    def reset_peak(self):
        self.events.append("reset_peak")

    def peak_memory_mb(self):
        return 1234.5

    def is_oom(self, exc):
        return "out of memory" in str(exc)

    def recover(self):
        self.events.append("recover")

    def ready_info(self):
        return {"weights": "fake"}


def cpu_context_parallelism(torch):
    """Makes diffusers 0.42.1's context parallelism run on a CPU, for the multi-rank tests
    only (never in the adapters): enable_parallelism divides the rank by
    torch.accelerator.device_count(), 0 without a GPU; and its context-parallel hook warns
    through logger.warning_once, which exists only once transformers has been imported."""
    import logging

    torch.accelerator.device_count = lambda: 1
    logging.Logger.warning_once = logging.Logger.warning


def have(*mods):
    """Whether every module is importable (the real-pipeline tests need the GPU host's stack)."""
    return not missing(*mods)


def missing(*mods):
    import importlib.util

    return [m for m in mods if importlib.util.find_spec(m) is None]


# The reason of a test skipped for missing modules; pytest.UnitTests (models/pyworker/pytest) reports such a
# test as not run, by name, and fails on any other skip.
NOT_RUN = "not run: missing python modules: "


def needs(*mods):
    """Skips a test or class where a module is missing, naming the missing ones, so the Go
    wrapper reports it as not run (never as a pass) and can check the modules are missing."""
    gone = missing(*mods)
    return unittest.skipUnless(not gone, NOT_RUN + ", ".join(gone))


class RealWorkerTestCase(unittest.TestCase):
    """A family's adapter.py run as a subprocess, as mediaserve runs it, over a real (tiny)
    bundle. A subclass's setUpClass makes cls.tmp and its bundle, then calls start_worker."""

    @classmethod
    def start_worker(cls, argv, stderr=None):
        """stderr: a file for the worker's log lines (default: dropped)."""
        import subprocess

        cls.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=stderr if stderr is not None else subprocess.DEVNULL, text=True, bufsize=1)

    @classmethod
    def tearDownClass(cls):
        import shutil

        if cls.proc.poll() is None:
            cls.proc.kill()
            cls.proc.wait()
        cls.proc.stdout.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def recv(self):
        line = self.proc.stdout.readline()
        self.assertTrue(line, "worker closed stdout")
        return json.loads(line)

    def send(self, obj):
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def run_job(self, job_id, settings, reference=None, cancel_after_first_step=False):
        """Runs one job and returns its terminal event, the output file's bytes and the
        (done, total) progress seen. Its frames events go to self.streamed as (frames,
        width, height), each checked against the file's size when it arrived."""
        out = os.path.join(self.tmp, job_id + ".rgb")
        open(out, "wb").close()
        msg = {"op": "run", "id": job_id, "settings": settings, "output": out}
        if reference:
            msg["reference"] = reference
        self.send(msg)
        progress = []
        self.streamed = []
        while True:
            ev = self.recv()
            self.assertEqual(ev.get("id"), job_id, ev)
            if ev["event"] == "frames":
                n, w, h = ev["frames"], ev["width"], ev["height"]
                self.assertGreaterEqual(os.path.getsize(out), n * w * h * 3, "announced frames are in the file")
                self.streamed.append((n, w, h))
                continue
            if ev["event"] != "progress":
                with open(out, "rb") as f:
                    return ev, f.read(), progress
            progress.append((ev["done"], ev["total"]))
            if cancel_after_first_step and len(progress) == 1:
                self.send({"op": "cancel", "id": job_id})


class ProtocolContract:
    """The protocol behaviour every family's worker shares, run against the family's fakes. Mix
    it into the family's ProtocolTest(WorkerTestCase) and define submit(job_id, **overrides),
    which sends one small valid run (settings overridden by overrides) and returns its output
    path. The family's FakePipe takes step_delay and fail, and sets .started when called."""

    def submit(self, job_id, **over):
        raise NotImplementedError

    def test_load_failure_is_fatal(self):
        def load():
            raise RuntimeError("no diffusers bundle at '/nowhere'")

        self.start(load=load)
        ev = self.out.next_event()
        self.assertEqual(ev["event"], "fatal")
        self.assertIn("/nowhere", ev["message"])
        self.thread.join(5)
        self.assertEqual(self.rc, [1])

    def test_cancel_of_a_queued_job(self):
        self.start(pipe=self.fake_pipe(step_delay=0.01))
        self.out.next_event()
        self.submit("a", num_inference_steps=10)
        self.submit("b", num_inference_steps=10)
        self.inp.send({"op": "cancel", "id": "b"})
        self.until("result", "a")
        err, progress = self.until("error", "b")
        self.assertEqual((err["code"], progress), ("cancelled", []))
        self.stop()

    def test_eof_drops_the_running_job_and_exits_0(self):
        self.start(pipe=self.fake_pipe(step_delay=0.02))
        self.out.next_event()
        self.submit("x", num_inference_steps=500)
        self.assertTrue(self.pipe.started.wait(5))
        t0 = time.time()
        self.stop()
        self.assertLess(time.time() - t0, 3)

    def test_pipeline_failures(self):
        self.start(pipe=self.fake_pipe(fail=RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")))
        self.out.next_event()
        self.submit("m")
        err, _ = self.until("error", "m")
        self.assertEqual(err["code"], "out_of_memory")
        self.assertIn("recover", self.backend.events)
        self.pipe.fail = ValueError("boom")
        self.submit("v")
        err, _ = self.until("error", "v")
        self.assertEqual(err["code"], "pipeline_error")
        self.assertIn("boom", err["message"])
        self.stop()

    def test_a_sticky_device_error_ends_the_worker(self):
        """A CUDA error that poisons the context is the job's pipeline_error, then the worker
        exits (status 1) so the server starts a fresh one; an out of memory does not."""
        self.start(pipe=self.fake_pipe(fail=RuntimeError("CUDA error: an illegal memory access was encountered")))
        self.out.next_event()
        self.submit("i")
        err, _ = self.until("error", "i")
        self.assertEqual(err["code"], "pipeline_error")
        self.assertIn("illegal memory access", err["message"])
        self.thread.join(5)
        self.assertEqual(self.rc, [1], "the worker exited after the job")

    def test_junk_lines_are_ignored(self):
        self.start()
        self.out.next_event()
        for junk in ("not json", "[1,2]", '{"op":"run"}', '{"op":"dance","id":"z"}', '{"op":"cancel","id":"nobody"}'):
            self.inp.send(junk)
        self.submit("r")
        self.until("result", "r")
        self.stop()

    def test_missing_output_and_bad_settings(self):
        self.start()
        self.out.next_event()
        self.inp.send({"op": "run", "id": "o", "settings": {"prompt": "p"}})
        err, _ = self.until("error", "o")
        self.assertEqual(err["code"], "invalid_request")
        self.inp.send({"op": "run", "id": "s", "settings": "nope", "output": self.path("s.rgb")})
        err, _ = self.until("error", "s")
        self.assertEqual(err["code"], "invalid_request")
        self.stop()


class FakePipe:
    """Stands in for a diffusers pipeline: records its calls, can fail or step slowly, calls the
    step callback num_inference_steps times (unless interrupted), then returns output(kw). A
    family subclasses it with output(kw) (and step/steps where its loop differs)."""

    def __init__(self, step_delay=0.0, fail=None):
        self.calls = []
        self.step_delay = step_delay
        self.fail = fail
        self._interrupt = False
        self.started = threading.Event()

    def __call__(self, **kw):
        self.calls.append(kw)
        self._interrupt = False
        self.started.set()
        if self.fail:
            raise self.fail
        for i in range(self.steps(kw)):
            if self._interrupt:
                continue
            time.sleep(self.step_delay)
            self.step(kw, i)
        return self.output(kw)

    def steps(self, kw):
        return kw["num_inference_steps"]

    def step(self, kw, i):
        kw["callback_on_step_end"](self, i, 1000 - i, {})

    def output(self, kw):
        raise NotImplementedError
