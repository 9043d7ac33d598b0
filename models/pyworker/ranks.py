"""One worker, several ranks: a Task whose layout spans N GPUs (docs/WORKER.md, "Several GPUs").

The server starts one worker per lane, as for one GPU, with CUDA_VISIBLE_DEVICES naming the
lane's N GPUs and --layout naming how the Task uses them. That process is rank 0: it starts
ranks 1..N-1 (the same command, with MEDIAQUAL_RANK set; stdin closed, stdout sent to stderr),
joins them in a torch.distributed group, and is the only one that speaks the protocol. Every
rank loads the same pipeline on its own GPU (cuda:<rank>) and runs every job's call with the
same seed, so their collectives meet; rank 0 writes the frames and reports.

Control goes over a gloo group on the CPU whatever the data backend: each job's run op is
broadcast from rank 0, and every cancelled() check is one broadcast of rank 0's answer, so all
ranks stop at the same step (a rank that stopped alone would leave the others waiting in a
collective for ever).

Failures: a rank that exits takes the group down. Rank 0 watches its children and exits with
status 1 when one dies, naming it on stderr; the server then reports the job worker_crashed and
restarts the whole group (the children die with rank 0: same process group, and a parent-death
signal). A failure inside a job that is not a JobError or Cancelled (both are raised at the
same point by every rank) may have left a collective half-done, so after reporting it rank 0
ends the group too.

torch is imported only when a group starts: the layout parsing is testable without it.
"""

import os
import signal
import subprocess
import sys
import threading

RANK_ENV = "MEDIAQUAL_RANK"
KINDS = ("single", "cfg", "ulysses")
# The group's timeout (the rendezvous and the tensors' collectives, inside jobs): 30 minutes;
# the tests of an idle lane shorten it. The control group waits for rank 0's next job, which
# may be hours away on an idle lane: it has no practical timeout (IDLE), or the ranks that
# wait in its broadcast would fail and take the lane down.
TIMEOUT_ENV = "MEDIAQUAL_GROUP_TIMEOUT_S"
IDLE_DAYS = 3650
# Starting a rank (a Python process importing torch) can outlast a short group timeout on a loaded
# host, and gloo's connect waits only that long: every rank first arrives at the store, waiting
# at least this long for the others.
ARRIVAL_S = 600


def group_timeout(env=os.environ):
    import datetime

    return datetime.timedelta(seconds=float(env.get(TIMEOUT_ENV, 1800)))


def parse_layout(layout):
    """'single' | 'cfg-2' | 'ulysses-N' (N >= 2) -> (kind, degree). Matches spec.Layout."""
    if layout is None or layout == "single":
        return "single", 1
    kind, sep, n = str(layout).partition("-")
    if sep and n.isdigit() and n.isascii():
        degree = int(n)
        if kind == "cfg" and degree == 2:
            return kind, degree
        if kind == "ulysses" and degree >= 2:
            return kind, degree
    raise ValueError("layout %r is not one of single, cfg-2, ulysses-N (N >= 2)" % (layout,))


def rank_from_env(env=os.environ):
    v = env.get(RANK_ENV, "0")
    if not v.isdigit():
        raise ValueError("%s=%r is not a rank" % (RANK_ENV, v))
    return int(v)


def rank_device(device, layout, env=os.environ):
    """The device of this rank: with several ranks on CUDA, cuda:<rank> of the lane's
    CUDA_VISIBLE_DEVICES (one GPU each); otherwise device as given."""
    _, world = parse_layout(layout)
    if world > 1 and str(device).startswith("cuda"):
        return "cuda:%d" % rank_from_env(env)
    return device


def _die_with_parent():
    """In a child before exec: SIGKILL when rank 0 dies (Linux), so no rank outlives it."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Group:
    """This process's place in a Task's ranks, and the control messages between them."""

    def __init__(self, rank, world, log):
        self.rank, self.world, self.log = rank, world, log
        self.children = []
        self.closing = False
        self.store = None  # rank 0's rendezvous store, once spawn made it

    # ---- start (rank 0 spawns, every rank joins)

    def spawn(self, argv=None, env=None):
        """Rank 0: start ranks 1..world-1 running argv (default: this very command) and watch
        them. Sets the rendezvous address in this process's environment."""
        import torch.distributed as dist

        argv = argv or [sys.executable] + sys.argv
        env = dict(os.environ if env is None else env)
        # Rank 0 hosts the rendezvous store on a port the kernel gives it while bound, so no
        # other process can take the port between choosing and listening.
        self.store = dist.TCPStore("127.0.0.1", 0, self.world, True, timeout=group_timeout(), wait_for_workers=False)
        os.environ["MASTER_ADDR"] = env["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = env["MASTER_PORT"] = str(self.store.port)
        for r in range(1, self.world):
            child_env = dict(env, **{RANK_ENV: str(r)})
            p = subprocess.Popen(argv, env=child_env, stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(),
                                 preexec_fn=_die_with_parent if sys.platform == "linux" else None)
            self.children.append((r, p))
            self.log("started rank %d of %d (pid %d)" % (r, self.world, p.pid))
        for r, p in self.children:
            threading.Thread(target=self._watch, args=(r, p), name="rank-%d" % r, daemon=True).start()

    def _watch(self, r, p):
        status = p.wait()
        if not self.closing:
            self.log("rank %d (pid %d) exited with status %s: ending the group" % (r, p.pid, status))
            sys.stderr.flush()
            os._exit(1)

    def dead(self, wait=2.0):
        """Rank 0, after a collective failed: the ranks that exited (waiting up to wait
        seconds for one to), as (rank, status) pairs. A peer's death usually reaches the
        others as a broken connection before its exit status does."""
        import time

        deadline = time.monotonic() + wait
        for r, p in self.children:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        return [(r, p.returncode) for r, p in self.children if p.returncode is not None]

    def join(self, cuda):
        """Every rank: join the group (NCCL for tensors on the GPU, gloo on the CPU) and open the
        gloo control group."""
        import datetime

        import torch
        import torch.distributed as dist

        if cuda:
            torch.cuda.set_device(self.rank)  # NCCL binds each rank's communicator to its GPU

        self.dist = dist
        # The device is named even on the CPU: diffusers' ulysses_anything picks the device of its
        # size exchange by looking for "cpu" in the backend string.
        backend = "cpu:gloo,cuda:nccl" if cuda else "cpu:gloo"
        if self.store is None:  # ranks 1..: a client of rank 0's store
            self.store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), self.world, False,
                                       timeout=group_timeout())
        arrival = max(group_timeout(), datetime.timedelta(seconds=ARRIVAL_S))
        self.store.set("arrived/%d" % self.rank, "1")
        self.store.wait(["arrived/%d" % r for r in range(self.world)], arrival)
        dist.init_process_group(backend=backend, store=self.store, rank=self.rank, world_size=self.world,
                                timeout=group_timeout())
        self.ctrl = dist.new_group(backend="gloo", timeout=datetime.timedelta(days=IDLE_DAYS))

    # ---- control messages

    def share(self, obj=None):
        """Rank 0's obj, on every rank."""
        box = [obj]
        self.dist.broadcast_object_list(box, src=0, group=self.ctrl)
        return box[0]

    def agree(self, flag=False):
        """Rank 0's flag, on every rank (one small broadcast)."""
        import torch

        t = torch.tensor([1 if flag else 0], dtype=torch.int32)
        self.dist.broadcast(t, src=0, group=self.ctrl)
        return bool(t.item())

    def gather(self, obj):
        """Every rank's obj, in rank order, on every rank."""
        out = [None] * self.world
        self.dist.all_gather_object(out, obj, group=self.ctrl)
        return out

    def close(self, timeout=10):
        """Rank 0, after telling the others to stop: wait for them, then kill what is left."""
        self.closing = True
        for r, p in self.children:
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.log("rank %d did not stop in %d s: killing it" % (r, timeout))
                p.kill()
