"""Tests of one worker on several ranks (ranks.py, parallel.py) on the CPU with gloo. They need
torch (and diffusers for the tiny-pipeline tests): models/pyworker/ranks_test.go runs them with
the torch virtualenv `make torch` builds, under `go test ./...`."""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # models/

from pyworker import testing  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "testdata", "ranked_worker.py")
SETTINGS = {"prompt": "a fox", "size": "4x2", "num_frames": 2, "fps": 8, "num_inference_steps": 3,
            "guidance": 1.0, "seed": 1}


class Ranked:
    """The fake ranked worker as the server runs it: protocol on stdin/stdout, stderr kept."""

    def __init__(self, layout="ulysses-2", env=None):
        self.dir = tempfile.TemporaryDirectory()
        self.err = open(os.path.join(self.dir.name, "stderr"), "w+")
        self.p = subprocess.Popen([sys.executable, WORKER, "--layout", layout], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.err, text=True,
                                  env=dict(os.environ, **(env or {})), start_new_session=True)
        self.n = 0

    def event(self):
        line = self.p.stdout.readline()
        return json.loads(line) if line else None

    def send(self, obj):
        self.p.stdin.write(json.dumps(obj) + "\n")
        self.p.stdin.flush()

    def run(self, **settings):
        self.n += 1
        job = "job-%d" % self.n
        out = os.path.join(self.dir.name, job + ".rgb")
        open(out, "wb").close()
        self.send({"op": "run", "id": job, "settings": dict(SETTINGS, **settings), "output": out})
        return job, out

    def end(self, timeout=30):
        """The final event (skipping progress) of the running job."""
        while True:
            ev = self.event()
            if ev is None or ev["event"] != "progress":
                return ev

    def wait(self, timeout=120):  # generous: make test runs four torch-heavy packages at once
        rc = self.p.wait(timeout=timeout)
        self.err.seek(0)
        return rc, self.err.read()

    def stderr(self):
        self.err.flush()
        with open(self.err.name) as f:
            return f.read()

    def close(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, 9)
            self.p.wait()
        for f in (self.p.stdin, self.p.stdout, self.err):
            try:
                f.close()
            except OSError:
                pass  # stdin may be closed already, its last write unflushed
        self.dir.cleanup()


def child_pid(stderr):
    for line in stderr.splitlines():
        if "started rank 1 of 2 (pid " in line:
            return int(line.rsplit("pid ", 1)[1].rstrip(")"))
    raise AssertionError("no rank 1 started in:\n" + stderr)


def gone(pid, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@testing.needs("torch", "numpy")
class GroupProtocolTest(unittest.TestCase):
    """A test that ends its group, or needs one started under an environment of its own, starts
    its own (start). The tests after which the group serves on (a cancel, an error on rank 0
    alone, a refused run) share one (serving), each ending with a job both ranks serve together:
    two groups fewer to start, each two ranks importing torch."""

    shared = None  # serving's group, closed with the class

    @classmethod
    def tearDownClass(cls):
        if cls.shared is not None:
            cls.shared.close()
            cls.shared = None

    def start(self, env=None):
        self.w = Ranked(env=env)
        self.addCleanup(self.w.close)
        self.ready()

    def serving(self):
        cls = type(self)
        if cls.shared is None:
            cls.shared = self.w = Ranked()
            self.ready()
        self.w = cls.shared
        self.assertIsNone(self.w.p.poll(), "the shared group has ended: %s" % self.w.stderr()[-2000:])

    def ready(self):
        ev = self.w.event()
        self.assertEqual(ev["event"], "ready", ev)
        self.assertEqual((ev["ranks"], ev["layout"]), (2, "ulysses-2"))
        return ev

    def test_a_job_needs_both_ranks_and_eof_ends_both(self):
        self.start()
        job, out = self.w.run()
        ev = self.w.end()
        self.assertEqual((ev["event"], ev["id"], ev["frames"]), ("result", job, 2), ev)
        self.assertEqual(ev["actual"]["layout"], "ulysses-2")
        # Every step is an all_reduce of rank+1: (1 + 2) * 3 steps.
        with open(out, "rb") as f:
            self.assertEqual(f.read(), bytes([9]) * (2 * 2 * 4 * 3))
        self.w.p.stdin.close()
        rc, err = self.w.wait()
        self.assertEqual(rc, 0, err)
        self.assertIn("[rank 1]: rank 1 finished a job", err)
        self.assertTrue(gone(child_pid(err)), "rank 1 outlived rank 0")

    def test_an_idle_lane_outlives_the_group_timeout(self):
        """Rank 1 waits for the next job in a broadcast of the control group; an idle lane
        longer than the group's timeout (here 2 s, 30 minutes in service) must still serve."""
        self.start(env={"MEDIAQUAL_GROUP_TIMEOUT_S": "2"})
        time.sleep(5)
        job, _ = self.w.run()
        ev = self.w.end()
        self.assertEqual((ev["event"], ev["id"]), ("result", job), "%s; stderr: %s" % (ev, self.w.stderr()[-2000:]))

    def test_a_rank_slower_to_start_than_the_group_timeout_still_joins(self):
        """Starting a rank (Python, torch) can outlast the group's timeout on a loaded host: the
        ranks first meet at the store, with a wait of their own."""
        self.start(env={"MEDIAQUAL_GROUP_TIMEOUT_S": "1", "RANKED_SLOW_START_S": "3"})
        job, _ = self.w.run()
        ev = self.w.end()
        self.assertEqual((ev["event"], ev["id"]), ("result", job), "%s; stderr: %s" % (ev, self.w.stderr()[-2000:]))

    def test_cancel_stops_every_rank_at_the_same_step(self):
        self.serving()
        job, _ = self.w.run(prompt="slow", num_inference_steps=50)
        self.assertEqual(self.w.event()["event"], "progress")
        self.w.send({"op": "cancel", "id": job})
        ev = self.w.end()
        self.assertEqual((ev["event"], ev["code"]), ("error", "cancelled"), ev)
        step = int(ev["message"].split("step ")[1].split()[0])
        self.assertLess(step, 50)
        # The group still serves, and both ranks had stopped at that step.
        job, _ = self.w.run()
        self.assertEqual(self.w.end()["event"], "result")
        err = self.w.stderr()
        self.assertIn("ranked-worker: rank 0 stopped at step %d\n" % step, err)
        self.assertIn("[rank 1]: rank 1 stopped at step %d\n" % step, err)

    def test_a_dead_rank_ends_the_group_and_is_named(self):
        self.start()
        self.w.run(prompt="crash rank 1")
        self.assertIsNone(self.w.end(), "no result or error: the process ended")
        rc, err = self.w.wait()
        self.assertEqual(rc, 1, err)
        # Named by whichever sees it first: the watcher, or the job whose collective broke.
        self.assertRegex(err, r"rank 1 (\(pid %d\) )?exited with status 7" % child_pid(err))

    def test_a_failure_on_rank_0_is_reported_then_ends_the_group(self):
        self.start()
        job, _ = self.w.run(prompt="raise rank 0")
        ev = self.w.end()
        self.assertEqual((ev["event"], ev["code"]), ("error", "pipeline_error"), ev)
        self.assertIn("pipeline broke on rank 0", ev["message"])
        rc, err = self.w.wait()
        self.assertEqual(rc, 1, err)
        self.assertTrue(gone(child_pid(err)), "rank 1 outlived rank 0")

    def test_a_failure_on_rank_1_ends_the_group(self):
        self.start()
        self.w.run(prompt="raise rank 1")
        self.assertIsNone(self.w.end())
        rc, err = self.w.wait()
        self.assertEqual(rc, 1, err)
        self.assertIn("failed on rank 1: RuntimeError: pipeline broke on rank 1", err)
        self.assertRegex(err, r"rank 1 (\(pid \d+\) )?exited with status 1")

    def test_an_error_on_rank_0_alone_after_the_steps_keeps_the_ranks_in_step(self):
        """A frame check that fails on rank 0 only (stream mismatch, frame write, size change)
        comes after every collective of the job: its error is the job's, and both ranks serve the
        next job together."""
        self.serving()
        job, _ = self.w.run(prompt="mismatch rank 0")
        ev = self.w.end()
        self.assertEqual((ev["event"], ev["id"], ev["code"]), ("error", job, "stream_mismatch"), ev)
        job, out = self.w.run()
        ev = self.w.end()
        self.assertEqual((ev["event"], ev["id"]), ("result", job), ev)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), bytes([9]) * (2 * 2 * 4 * 3), "both ranks took part")

    def test_a_bad_run_is_refused_on_rank_0_alone(self):
        # Refused before it is shared: rank 1 never sees it, and the group serves on.
        self.serving()
        self.w.send({"op": "run", "id": "bad", "settings": SETTINGS})
        ev = self.w.end()
        self.assertEqual((ev["event"], ev["id"], ev["code"]), ("error", "bad", "invalid_request"), ev)
        self.w.run()
        self.assertEqual(self.w.end()["event"], "result")


@testing.needs("torch", "numpy")
class GroupLoadTest(unittest.TestCase):
    def test_a_load_failure_on_rank_1_is_fatal_and_named(self):
        w = Ranked(env={"RANKED_FAIL_LOAD_RANK": "1"})
        self.addCleanup(w.close)
        ev = w.event()
        self.assertEqual(ev["event"], "fatal", ev)
        self.assertEqual(ev["message"], "rank 1: RuntimeError: no weights on rank 1")
        rc, err = w.wait()
        self.assertEqual(rc, 1, err)


@testing.needs("torch", "diffusers", "transformers")
class TinyPipelineTest(unittest.TestCase):
    """A real tiny WanPipeline on 2 ranks against itself alone (testdata/tiny_wan_parallel.py)."""

    # Every scenario runs in one invocation, in these two ranks, each over a fresh pipeline:
    # the ranks import torch and diffusers once, not once a scenario. The one expected to
    # raise (on both ranks) runs last.
    FAULTS = ("ulysses-2 --fault=attention-half", "ulysses-2 --fault=rope-shifted",
              "cfg-2 --fault=branch-duplicated", "cfg-2 --fault=branch-lost")
    SCENARIOS = ("cfg-2", "cfg-2 --break-exchange", "ulysses-2", "cfg-2 --fused", "ulysses-2 --fused",
                 "ulysses-2 --fused --old-processors", *FAULTS, "ulysses-2 --odd --plain-ulysses")

    @classmethod
    def setUpClass(cls):
        # Triton's interpreter runs the fused kernels on CPU tensors (chosen when they are defined).
        cls.out = subprocess.run([sys.executable, os.path.join(HERE, "testdata", "tiny_wan_parallel.py"), *cls.SCENARIOS],
                                 capture_output=True, text=True, timeout=600, env=dict(os.environ, TRITON_INTERPRET="1"))
        cls.reports = {}
        for line in cls.out.stdout.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                cls.reports[r["scenario"]] = r

    def parallel(self, scenario, raises=False):
        """scenario's report; the invocation must have exited 0 with every scenario reported,
        and scenario have raised ("errors") only where it is expected to."""
        self.assertEqual(self.out.returncode, 0, self.out.stderr[-4000:])
        self.assertEqual(sorted(self.reports), sorted(self.SCENARIOS), self.out.stdout)
        r = self.reports[scenario]
        self.assertEqual(r["layout"], scenario.split()[0], r)
        self.assertEqual("errors" in r, raises, "%s (stderr: %s)" % (r, self.out.stderr[-4000:]))
        return r

    def test_an_even_split_refuses_a_sequence_it_cannot_halve(self):
        """Why parallel.apply sets ulysses_anything: diffusers' even split fails on 3 tokens. The
        uneven split itself cannot run here: its last gather sends chunks of unequal size,
        which NCCL takes and gloo refuses, so it is left to the GPU."""
        r = self.parallel("ulysses-2 --odd --plain-ulysses", raises=True)
        self.assertIn("must be divisible by mesh size", " ".join(e or "" for e in r["errors"]), r)

    def test_cfg_2_gives_the_same_bytes_with_half_the_calls(self):
        r = self.parallel("cfg-2")
        self.assertTrue(r["equal"], r)
        self.assertEqual(r["calls"], [r["steps"], r["steps"]], "each rank runs one branch a step")

    def test_cfg_2_without_its_exchange_differs(self):
        r = self.parallel("cfg-2 --break-exchange")
        self.assertFalse(r["equal"], r)
        self.assertGreater(r["differing"], 0, r)
        self.assertGreater(r["nonfinite"], 0, "the unfilled placeholders are NaN, which the worker refuses: %s" % r)

    def test_ulysses_2_gives_the_same_bytes(self):
        r = self.parallel("ulysses-2")
        self.assertTrue(r["equal"], r)
        self.assertEqual(r["calls"], [2 * r["steps"]] * 2, "both branches on both ranks, half the sequence each")

    def fused(self, scenario):
        r = self.parallel(scenario)
        self.assertEqual(r["modules"], {"self-attention q/k norm and RoPE": 4, "feed-forward GELU": 2}, r)
        return r

    def test_each_layout_with_the_fused_kernels_is_the_one_rank_fused_run(self):
        """The fused processors put in after the layout (the adapters' order) keep its parallel
        config: the same frames as the fused pipeline on one rank, and parity within its bound
        against eager bf16 on one rank (the fp32 floor measured)."""
        for scenario in ("cfg-2 --fused", "ulysses-2 --fused"):
            r = self.fused(scenario)
            self.assertTrue(r["equal"], r)
            p = r["parity"]
            self.assertTrue(p["passed"], p)
            self.assertGreater(p["fp32_reference"], 0.0, "bf16 is measurably off fp32: a floor")
            self.assertLessEqual(p["fp32_served"], p["bound"], p)

    def test_parity_catches_fused_processors_that_drop_the_layout(self):
        """Before fused.set_processor, the processors installed after enable_parallelism had no
        parallel config, and ulysses-2 attended over each rank's own half of the sequence."""
        r = self.fused("ulysses-2 --fused --old-processors")
        self.assertFalse(r["equal"], r)
        p = r["parity"]
        self.assertFalse(p["passed"], p)
        self.assertGreater(p["fp32_served"], 2 * p["bound"], "far outside, not at the edge: %s" % p)

    def test_parity_refuses_each_fault_under_its_layout(self):
        """faults.py's wrong runtimes on two ranks (gloo): attention over each rank's half and
        shifted rotary positions under ulysses-2 move the conditional prediction; a cfg-2
        exchange that duplicated or lost a branch leaves it exact and moves the unconditional one."""
        for scenario in self.FAULTS:
            with self.subTest(scenario=scenario):
                p = self.parallel(scenario)["parity"]
                self.assertFalse(p["passed"], p)
                self.assertEqual(p["fault"], scenario.split("=")[1])
                if "branch" in scenario:
                    self.assertEqual(p["cond_rel_l2"], 0.0, p)
                    self.assertGreater(p["uncond_fp32_served"], p["uncond_bound"], p)
                else:
                    self.assertGreater(p["cond_fp32_served"], p["cond_bound"], p)


@testing.needs("torch", "diffusers", "transformers")
class CFGBatchTest(unittest.TestCase):
    """parallel.CFGBatch on a tiny real WanPipeline in this process: a step's two branches as
    one batch of two give the two-pass frames up to float rounding, with half the passes."""

    def setUp(self):
        import torch

        sys.path.insert(0, os.path.join(HERE, "testdata"))
        import tiny_wan_parallel as tiny
        from pyworker import parallel

        self.torch, self.tiny, self.parallel = torch, tiny, parallel
        self.pipe = tiny.pipeline()
        self.alone = tiny.generate(self.pipe, tiny.SHAPE)

    def batched(self, broken=False):
        calls = self.tiny.counted(self.pipe.transformer)
        b = self.parallel.CFGBatch(self.pipe.transformer, self.torch)
        if broken:  # the halves handed back the wrong way round: cond as uncond
            complete = b.complete
            b.complete = lambda cond, ck, uncond, uk: complete(uncond, ck, cond, uk)
        b.begin(True)
        return self.tiny.generate(self.pipe, self.tiny.SHAPE), calls[0], b.report()

    def test_one_pass_a_step_and_the_same_frames_to_rounding(self):
        frames, calls, report = self.batched()
        steps = self.tiny.STEPS
        self.assertEqual(calls, steps, "one forward pass a step")
        self.assertEqual(report, "cfg-batch: %d forward passes for the call's %d transformer calls" % (steps, 2 * steps))
        self.assertLess(float((frames - self.alone).abs().max()), 1e-5)

    def test_swapped_halves_are_caught(self):
        frames, _, _ = self.batched(broken=True)
        self.assertGreater(float((frames - self.alone).abs().max()), 1e-2)

    def test_branches_of_other_shapes_are_refused_by_name(self):
        b = self.parallel.CFGBatch(self.pipe.transformer, self.torch)
        b.begin(True)
        t = self.torch
        hs = t.zeros(1, 16, 2, 4, 4)
        with self.pipe.transformer.cache_context("cond"):
            self.pipe.transformer(hidden_states=hs, timestep=t.tensor([1.0]), encoder_hidden_states=t.zeros(1, 6, 32),
                                  return_dict=False)
        with self.pipe.transformer.cache_context("uncond"), self.assertRaisesRegex(RuntimeError, "encoder_hidden_states"):
            self.pipe.transformer(hidden_states=hs, timestep=t.tensor([1.0]), encoder_hidden_states=t.zeros(1, 5, 32),
                                  return_dict=False)


@testing.needs("torch", "diffusers", "transformers", "accelerate", "numpy")
class AdapterLayoutTest(unittest.TestCase):
    """The Wan adapter itself under cfg-2 (its rank spawning, apply_layout and the per-job
    cfg switch) on a tiny L0 bundle on the CPU, against the same adapter on one rank. Each
    layout's adapter starts once and runs the jobs of both tests in turn (GUIDANCE), so the
    second job also shows the switch from two branches a step to one within a group."""

    GUIDANCE = (5.0, 1.0)  # one job each, in this order: both branches, then only cond

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        wan = os.path.join(os.path.dirname(HERE), "wan")
        subprocess.run([sys.executable, os.path.join(wan, "build_l0.py"), "--tiny", "--device", "cpu", "--out", cls.tmp.name],
                       check=True, stdout=subprocess.DEVNULL)
        cls.argv = [sys.executable, os.path.join(wan, "adapter.py"), "--bundle",
                    os.path.join(cls.tmp.name, "Wan-AI", "Wan2.1-T2V-1.3B-Diffusers"), "--flow-shift", "3.0", "--device", "cpu"]
        cls.runs = {layout: cls.serve(layout) for layout in ("single", "cfg-2")}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def serve(cls, layout):
        """One adapter under layout running a job per GUIDANCE, then stdin closed: its ready
        event, per job (terminal event, frames, frame counts streamed), exit status and stderr."""
        run = {"jobs": []}
        err = open(os.path.join(cls.tmp.name, "stderr-%s" % layout), "w+")
        p = subprocess.Popen(cls.argv + ["--layout", layout], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=err, text=True, start_new_session=True)
        try:
            run["ready"] = json.loads(p.stdout.readline())
            for i, guidance in enumerate(cls.GUIDANCE):
                out = os.path.join(cls.tmp.name, "out-%s-%d.rgb" % (layout, i))
                open(out, "wb").close()
                s = dict(SETTINGS, size="64x48", num_frames=5, num_inference_steps=2, guidance=guidance)
                p.stdin.write(json.dumps({"op": "run", "id": "j%d" % i, "settings": s, "output": out}) + "\n")
                p.stdin.flush()
                streamed = []  # rank 0 streams the clip as its VAE decodes, whatever the layout
                while True:
                    ev = json.loads(p.stdout.readline())
                    if ev["event"] == "frames":
                        streamed.append(ev["frames"])
                    elif ev["event"] != "progress":
                        break
                with open(out, "rb") as f:
                    run["jobs"].append((ev, f.read(), streamed))
            p.stdin.close()
            run["rc"] = p.wait(timeout=180)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
            p.stdout.close()
            err.seek(0)
            run["stderr"] = err.read()
            err.close()
        return run

    def job(self, layout, guidance):
        """(ready, terminal event, frames, frames streamed) of layout's job at guidance."""
        run = self.runs[layout]
        self.assertEqual(run["rc"], 0, run["stderr"][-3000:])
        return (run["ready"],) + run["jobs"][self.GUIDANCE.index(guidance)]

    def computed(self, prefix, guidance):
        """cfg-2's report of the job at guidance, logged under prefix (a rank's log name): each
        rank logs one a call, in order: parity's served step at load (one step of both
        branches, split), then one a job."""
        lines = [line[len(prefix):] for line in self.runs["cfg-2"]["stderr"].splitlines()
                 if line.startswith(prefix + "cfg-2: this rank computed ")]
        self.assertEqual(len(lines), 1 + len(self.GUIDANCE), lines)
        self.assertEqual(lines[0], "cfg-2: this rank computed 1 of the call's 2 transformer calls", "parity's step")
        return lines[1 + self.GUIDANCE.index(guidance)]

    def test_cfg_2_gives_the_one_rank_bytes(self):
        ready1, res1, one, _ = self.job("single", 5.0)
        ready2, res2, two, streamed = self.job("cfg-2", 5.0)
        self.assertEqual((ready2["ranks"], ready2["layout"]), (2, "cfg-2"), ready2)
        # Parity before ready: cfg-2's first step is eager's on one rank, bit for bit.
        self.assertEqual((ready2["parity"]["passed"], ready2["parity"]["rel_l2"]), (True, 0.0), ready2)
        self.assertEqual(res2["actual"]["parity"], ready2["parity"], "every result carries the figures")
        self.assertNotIn("ranks", ready1)
        self.assertEqual((res1["event"], res1["actual"]["layout"]), ("result", "single"), res1)
        self.assertEqual((res2["event"], res2["actual"]["layout"]), ("result", "cfg-2"), res2)
        self.assertEqual(len(two), 5 * 48 * 64 * 3)
        self.assertEqual(one, two)
        self.assertEqual(streamed, [1, 5], "rank 0 streamed the frames, once")
        # 2 steps of 2 branches, split: each rank computed its own branch only.
        for prefix in ("wan-adapter: ", "wan-adapter[rank 1]: "):
            self.assertEqual(self.computed(prefix, 5.0), "cfg-2: this rank computed 2 of the call's 4 transformer calls")

    def test_cfg_2_without_guidance_runs_one_branch_on_both(self):
        # guidance 1: WanPipeline runs no uncond branch, so cfg-2 must not wait for one.
        _, res1, one, _ = self.job("single", 1.0)
        _, res2, two, _ = self.job("cfg-2", 1.0)
        self.assertEqual((res1["event"], res2["event"]), ("result", "result"), (res1, res2))
        self.assertEqual(one, two)
        self.assertEqual(self.computed("wan-adapter[rank 1]: ", 1.0),
                         "cfg-2: this rank computed 2 of the call's 2 transformer calls")


if __name__ == "__main__":
    unittest.main()
