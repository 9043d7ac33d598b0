"""The peers' GPU stand-in: renders one request with harness/peers/render, the row's native
Task and mediaserve's encoder, for a model that honours what it is asked.

The bytes are deterministic (the reference families are); the Task's step lines become the
peer's progress reports and its wall time the peer's own time field. What the renderer cannot
make fails the render with its message, which the peer reports as its job's failure.
"""
import asyncio
import dataclasses
import io
import json
import os
import re
import shutil
import tempfile

STEP = re.compile(r"msg=step done=(\d+) of=(\d+)")


@dataclasses.dataclass
class Output:
    path: str = ""
    task_ms: float = 0.0
    actual: dict = dataclasses.field(default_factory=dict)
    error: str = ""


def number(x):
    """A float as the shortest text that reads back the same (5.0 -> "5")."""
    return repr(float(x)).removesuffix(".0")


class Renderer:
    def __init__(self, binary, row, work):
        self.binary, self.row, self.work = binary, row, work
        os.makedirs(work, exist_ok=True)

    async def run(self, fields, reference, step):
        """Renders fields (HTTP names, text values); step(done, total) is called per step."""
        out = tempfile.mkdtemp(dir=self.work)
        args = [self.binary, "-model", self.row, "-out", out]
        if reference:
            args += ["-reference", reference]
        for k, v in fields.items():
            args += ["-set", f"{k}={v}"]
        proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        lines = []
        async for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            m = STEP.search(line)
            if m:
                step(int(m.group(1)), int(m.group(2)))
            else:
                lines.append(line)
        stdout = (await proc.stdout.read()).decode().strip()
        if await proc.wait() != 0:
            shutil.rmtree(out, ignore_errors=True)
            return Output(error=(lines[-1] if lines else "render failed").removeprefix("render: "))
        with open(os.path.join(out, "actual.json")) as f:
            rec = json.load(f)
        return Output(path=stdout.splitlines()[-1], task_ms=rec["task_call_wall_ms"], actual=rec["product"]["actual"])


def convert(src, dst):
    """Moves the rendered file to dst, re-encoding a PNG when dst names another image format;
    returns dst's bytes."""
    ext = os.path.splitext(dst)[1].lower()
    if src.endswith(".png") and ext in (".jpg", ".jpeg", ".webp"):
        from PIL import Image

        buf = io.BytesIO()
        Image.open(src).convert("RGB").save(buf, format="JPEG" if ext != ".webp" else "WEBP")
        data = buf.getvalue()
        with open(dst, "wb") as f:
            f.write(data)
        os.remove(src)
        return data
    shutil.move(src, dst)
    with open(dst, "rb") as f:
        return f.read()
