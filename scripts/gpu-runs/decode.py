"""Pillow's decode of PNG uploads as the worker does it (models/pyworker/job.py open_reference),
timed alone: wall and this thread's CPU time, and zlib's inflate of the IDAT data alone. With
--torch, again after importing torch and touching the GPU, as a worker has, and with
torchvision's decoder instead.
  python3 scripts/gpu-runs/decode.py [--torch] FILE.png...
After a Qwen qualification the uploads are the case's references/*.png."""
import argparse
import os
import statistics
import sys
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from models.pyworker.job import open_reference  # noqa: E402


def idat(path):
    b = open(path, "rb").read()
    i, out = 8, []
    while i + 8 <= len(b):
        n = int.from_bytes(b[i:i + 4], "big")
        if b[i + 4:i + 8] == b"IDAT":
            out.append(b[i + 8:i + 8 + n])
        i += 12 + n
    return b"".join(out)


def torchvision_reference(path):
    """The alternative in the kit: torchvision's decode_png (libpng), then the Pillow image the
    pipeline takes."""
    from PIL import Image
    from torchvision.io import decode_png, read_file

    return Image.fromarray(decode_png(read_file(path)).permute(1, 2, 0).numpy())


def report(tag, paths, reps, decode=open_reference):
    wall, cpu, inflate = [], [], []
    for _ in range(reps):
        for p in paths:
            w, c = time.perf_counter(), time.thread_time()
            decode(p)
            wall.append((time.perf_counter() - w) * 1e3)
            cpu.append((time.thread_time() - c) * 1e3)
            data = idat(p)
            t = time.perf_counter()
            zlib.decompress(data)
            inflate.append((time.perf_counter() - t) * 1e3)
    print("%-18s decode p50 %.1f ms (min %.1f, max %.1f), this thread's CPU p50 %.1f ms; inflate alone p50 %.1f ms (%d decodes)" % (
        tag, statistics.median(wall), min(wall), max(wall), statistics.median(cpu), statistics.median(inflate), len(wall)), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torch", action="store_true", help="also after importing torch and touching the GPU")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    import PIL
    from PIL import features
    print("Pillow %s, zlib %s, %d CPUs; %s" % (PIL.__version__, features.version("zlib"), os.cpu_count(),
                                              ", ".join("%s %d B" % (os.path.basename(p), os.path.getsize(p)) for p in a.files)))
    report("plain", a.files, a.reps)
    if a.torch:
        import torch
        torch.ones(1, device="cuda" if torch.cuda.is_available() else "cpu").sum().item()
        report("torch imported", a.files, a.reps)
        report("torchvision", a.files, a.reps, torchvision_reference)


if __name__ == "__main__":
    main()
