"""The decode of PNG uploads as the worker does it (models/pyworker/job.py open_reference, the
pipelined decode of models/pyworker/pngdecode.py) against Pillow's decode alone, timed in
alternating rounds: wall and process CPU time, and zlib's inflate of the IDAT data alone. Each
file is first re-encoded as AIPerf sends a reference (Pillow's PNG writer at compress_level 6,
aiperf/dataset/utils.py encode_image): the bytes the server received. With --torch, again
after importing torch and touching the GPU, as a worker has.
  python3 scripts/gpu-runs/decode.py [--torch] [--reps N] FILE...
After a Qwen qualification the case's references/*.png are the files AIPerf read."""
import argparse
import io
import os
import statistics
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from models.pyworker import pngdecode  # noqa: E402
from models.pyworker.job import open_reference  # noqa: E402


def as_sent(path, into):
    """path re-encoded as AIPerf sends it, written into the directory into."""
    from PIL import Image

    with Image.open(path) as im:
        buf = io.BytesIO()
        im.save(buf, format="PNG", compress_level=6, optimize=False)
    out = os.path.join(into, os.path.basename(path))
    with open(out, "wb") as f:
        f.write(buf.getvalue())
    return out


def pillow_alone(path):
    with open(path, "rb") as f:
        return pngdecode.pillow(f.read())


def inflate_alone(path):
    with open(path, "rb") as f:
        data = f.read()
    _, _, idats, _ = pngdecode.layout(data)
    zlib.decompress(b"".join(data[a:b] for a, b in idats))


def report(tag, paths, reps, decode):
    wall, cpu = [], []
    for _ in range(reps):
        for p in paths:
            w, c = time.perf_counter(), time.process_time()
            decode(p)
            wall.append((time.perf_counter() - w) * 1e3)
            cpu.append((time.process_time() - c) * 1e3)
    print("%-28s decode p50 %.1f ms (min %.1f, max %.1f), process CPU p50 %.1f ms (%d decodes)" % (
        tag, statistics.median(wall), min(wall), max(wall), statistics.median(cpu), len(wall)), flush=True)


def rounds(tag, paths, reps):
    for r in (1, 2):
        report("%s, pillow alone %d" % (tag, r), paths, reps, pillow_alone)
        report("%s, pipelined %d" % (tag, r), paths, reps, open_reference)
    report("%s, inflate alone" % tag, paths, reps, inflate_alone)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torch", action="store_true", help="also after importing torch and touching the GPU")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    import PIL
    from PIL import features

    with tempfile.TemporaryDirectory() as d:
        paths = [as_sent(p, d) for p in a.files]
        print("Pillow %s, zlib %s, %d CPUs; as sent: %s" % (PIL.__version__, features.version("zlib"), os.cpu_count(),
                                                           ", ".join("%s %d B" % (os.path.basename(p), os.path.getsize(p)) for p in paths)))
        rounds("plain", paths, a.reps)
        if a.torch:
            import torch
            torch.ones(1, device="cuda" if torch.cuda.is_available() else "cpu").sum().item()
            rounds("torch imported", paths, a.reps)


if __name__ == "__main__":
    main()
