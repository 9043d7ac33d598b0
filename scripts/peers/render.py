"""The peers' model stand-in: renders one request with harness/peers/render, the row's native
Task, for a model that honours what it is asked, and gives back its frames raw (uint8, T x H x W
x 3): the peer's own code encodes them.

The frames are deterministic (the reference families are); the Task's step lines become the
peer's progress reports. What the renderer cannot make fails the render with its message, which
the peer reports as its job's failure.
"""
import dataclasses
import json
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

STEP = re.compile(r"msg=step done=(\d+) of=(\d+)")


@dataclasses.dataclass
class Output:
    path: str = ""  # the raw frames
    width: int = 0
    height: int = 0
    count: int = 0  # frames
    task_ms: float = 0.0
    actual: dict = dataclasses.field(default_factory=dict)
    error: str = ""


def number(x):
    """A float as the shortest text that reads back the same (5.0 -> "5")."""
    return repr(float(x)).removesuffix(".0")


def frames(out):
    """out's frames, uint8 [T, H, W, 3]; the file is removed."""
    with open(out.path, "rb") as f:
        pix = np.frombuffer(bytearray(f.read()), dtype=np.uint8)
    shutil.rmtree(os.path.dirname(out.path), ignore_errors=True)
    return pix.reshape(out.count, out.height, out.width, 3)


class Renderer:
    def __init__(self, binary, row, work):
        self.binary, self.row, self.work = binary, row, work
        os.makedirs(work, exist_ok=True)

    def run(self, fields, reference, step):
        """Renders fields (HTTP names, text values); step(done, total) is called per step."""
        out = tempfile.mkdtemp(dir=self.work)
        args = [self.binary, "-model", self.row, "-out", out]
        if reference:
            args += ["-reference", reference]
        for k, v in fields.items():
            args += ["-set", f"{k}={v}"]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
        lines = []
        for line in proc.stderr:
            m = STEP.search(line)
            if m:
                step(int(m.group(1)), int(m.group(2)))
            else:
                lines.append(line.rstrip())
        stdout = proc.stdout.read().strip()
        if proc.wait() != 0:
            shutil.rmtree(out, ignore_errors=True)
            return Output(error=(lines[-1] if lines else "render failed").removeprefix("render: "))
        with open(os.path.join(out, "actual.json")) as f:
            rec = json.load(f)
        return Output(path=stdout.splitlines()[-1], width=rec["width"], height=rec["height"], count=rec["frames"],
                      task_ms=rec["task_call_wall_ms"], actual=rec["actual"])
