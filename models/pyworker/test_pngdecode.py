"""pngdecode held to Pillow's own decode: the same pixels, mode and size for every PNG the
pipeline takes, Pillow's verdict for every other, on crafted files and on seeded mutations of
them (PNGDECODE_MUTATIONS of them; `make fuzz` runs more)."""

import hashlib
import io
import os
import random
import struct
import sys
import unittest
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # models/

from pyworker import pngdecode  # noqa: E402
from pyworker import testing  # noqa: E402


def png(w, h, colour=2, depth=8, seed=0, interlace=0, idat_size=None, before=(), after=(), level=6, filtered=None):
    """A PNG whose filtered rows are random bytes behind random filter types (each a valid row),
    its IDAT data cut into chunks of idat_size (one chunk: None), with extra chunks before the
    IDAT run and after it."""
    rng = random.Random(seed)
    row = (w * pngdecode.CHANNELS[colour] * depth + 7) // 8
    if filtered is None:
        filtered = b"".join(bytes([rng.randrange(5)]) + rng.randbytes(row) for _ in range(h))
    z = zlib.compress(filtered, level)
    size = idat_size or len(z)
    out = pngdecode.SIGNATURE + pngdecode.chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, interlace))
    for cid, payload in before:
        out += pngdecode.chunk(cid, payload)
    for i in range(0, len(z), size):
        out += pngdecode.chunk(b"IDAT", z[i:i + size])
    for cid, payload in after:
        out += pngdecode.chunk(cid, payload)
    return out + pngdecode.chunk(b"IEND", b"")


def outcome(decode, data):
    """What a decode made of data: (mode, size, the pixels' sha256), or the error's type."""
    try:
        im = decode(data)
        return im.mode, im.size, hashlib.sha256(im.tobytes()).hexdigest()
    except Exception as e:
        return type(e).__name__


@testing.needs("PIL")
class PipelinedIsPillow(unittest.TestCase):
    def assert_taken_and_same(self, data):
        plan = pngdecode.layout(data)
        self.assertIsNotNone(plan, "the pipeline should take this PNG")
        want = outcome(pngdecode.pillow, data)
        self.assertIsInstance(want, tuple, "Pillow should decode it")
        self.assertEqual(outcome(lambda d: pngdecode.pipelined(d, *plan), data), want)

    def test_the_kinds_of_png(self):
        palette = bytes(range(256)) * 3
        cases = {
            "rgb": png(37, 23),
            "rgba": png(16, 9, colour=6),
            "grey": png(17, 5, colour=0),
            "grey 1-bit": png(19, 7, colour=0, depth=1),
            "grey+alpha": png(8, 8, colour=4),
            "rgb 16-bit": png(9, 6, depth=16),
            "palette with tRNS": png(11, 4, colour=3, before=[(b"PLTE", palette[:3 * 256]), (b"tRNS", bytes(range(256)))],
                                     filtered=b"".join(b"\x00" + bytes(range(i, i + 11)) for i in range(4))),
            "many IDAT chunks": png(64, 48, idat_size=97),
            "one-byte IDAT chunks": png(12, 3, idat_size=1),
            "text after the image": png(20, 20, idat_size=300, after=[(b"tEXt", b"note\x00after")]),
            "stored rows": png(30, 30, level=0),
        }
        for name, data in cases.items():
            with self.subTest(name):
                self.assert_taken_and_same(data)

    def test_an_upload_as_aiperf_sends_it(self):
        # Pillow's own writer (compress_level 6, adaptive filters), as AIPerf re-encodes a
        # reference, with IDAT chunks of 64 KiB.
        from PIL import Image

        rng = random.Random(1)
        im = Image.frombytes("RGB", (300, 200), bytes(rng.randrange(64) for _ in range(300 * 200 * 3)))
        buf = io.BytesIO()
        im.save(buf, format="PNG", compress_level=6, optimize=False)
        self.assert_taken_and_same(buf.getvalue())
        self.assertEqual(pngdecode.decode(buf.getvalue()).tobytes(), im.tobytes())

    def test_what_the_pipeline_leaves_to_pillow(self):
        from PIL import Image

        frames = [Image.new("RGB", (8, 8), c) for c in ("red", "blue")]
        apng = io.BytesIO()
        frames[0].save(apng, format="PNG", save_all=True, append_images=frames[1:])
        jpeg = io.BytesIO()
        frames[0].save(jpeg, format="JPEG")
        for name, data in {
            "interlaced": png(9, 9, interlace=1),
            "animated": apng.getvalue(),
            "a JPEG": jpeg.getvalue(),
            "no IDAT": png(4, 4)[:33] + pngdecode.chunk(b"IEND", b""),
            "a chunk past the end": png(4, 4)[:-20],
        }.items():
            with self.subTest(name):
                self.assertIsNone(pngdecode.layout(data))
                self.assertEqual(outcome(pngdecode.decode, data), outcome(pngdecode.pillow, data))

    def test_a_stream_that_inflates_past_its_rows_stops_at_them(self):
        # 100 rows' worth of zeros behind an IHDR of one row: Pillow stops at the row, and so
        # does the inflater, holding no more than the rows.
        rows = 1 + 3 * 64
        data = png(64, 1, filtered=bytes(rows * 100))
        filtered, head, idats, rest = pngdecode.layout(data)
        self.assertEqual(filtered, rows)
        relay = pngdecode.Relay()
        pngdecode.inflate(data, filtered, idats, rest, relay)
        self.assertLess(len(relay.buf), 2 * rows + 64)
        self.assert_taken_and_same(data)

    def test_an_inflater_that_dies_leaves_no_reader_waiting(self):
        # Not even an exception of the kind decode catches: Pillow is told the data ended.
        import threading

        class Died(BaseException):
            pass

        def die(*args):
            raise Died()

        data = png(20, 20, idat_size=50)
        chunk, hook = pngdecode.chunk, threading.excepthook
        pngdecode.chunk, threading.excepthook = die, lambda args: None
        got = []

        def reader():
            try:
                pngdecode.pipelined(data, *pngdecode.layout(data))
                got.append("decoded")
            except Exception as e:
                got.append(e)

        try:
            t = threading.Thread(target=reader, daemon=True)
            t.start()
            t.join(10)  # bounded: a reader left waiting fails the test, it does not hang it
        finally:
            pngdecode.chunk, threading.excepthook = chunk, hook
        self.assertFalse(t.is_alive(), "Pillow still waits for the inflater's bytes")
        self.assertIsInstance(got[0], Exception)

    def test_a_read_waits_for_the_inflater_no_longer_than_wait(self):
        relay, wait = pngdecode.Relay(), pngdecode.WAIT
        relay.append(b"head")
        pngdecode.WAIT = 0.2
        try:
            self.assertEqual(relay.read(4), b"head")
            with self.assertRaises(TimeoutError):
                relay.read(1)  # nothing more comes, and nothing says so
        finally:
            pngdecode.WAIT = wait

    def test_broken_uploads_get_pillows_verdict(self):
        good = png(40, 30, idat_size=200)
        plan = pngdecode.layout(good)
        z_at = plan[2][0][0]
        cases = {
            "cut in the image data": good[:z_at + 150],
            "stream cut short": png(40, 30, filtered=bytes(100)),
            "not deflate": good[:z_at] + b"\xff" * 8 + good[z_at + 8:],
        }
        for name, data in cases.items():
            with self.subTest(name):
                got = outcome(pngdecode.decode, data)
                self.assertEqual(got, outcome(pngdecode.pillow, data))
                self.assertIsInstance(got, str, "Pillow refuses it, and so must decode")
        # Without its IEND Pillow takes the image, and so does decode, through the pipeline.
        self.assert_taken_and_same(good[:plan[3]])

    def test_mutated_uploads(self):
        """A differential fuzz: random PNGs of every kind, most of them mutated, get the same
        outcome from decode as from Pillow alone, and enough go through the pipeline to mean
        something."""
        n = int(os.environ.get("PNGDECODE_MUTATIONS", "500"))
        rng = random.Random(28)
        piped = 0
        for i in range(n):
            data = bytearray(random_png(rng))
            for _ in range(rng.choice((0, 1, 1, 2, 3))):
                if not data:
                    break
                at = rng.randrange(len(data))
                kind = rng.randrange(4)
                if kind == 0:
                    data[at] ^= 1 << rng.randrange(8)
                elif kind == 1:
                    del data[at:at + rng.randint(1, 16)]
                elif kind == 2:
                    data[at:at] = rng.randbytes(rng.randint(1, 16))
                else:
                    del data[at:]
            data = bytes(data)
            self.assertEqual(outcome(pngdecode.decode, data), outcome(pngdecode.pillow, data), "input %d: %r" % (i, data))
            plan = pngdecode.layout(data)
            if plan is not None and isinstance(outcome(lambda d: pngdecode.pipelined(d, *plan), data), tuple):
                piped += 1
        self.assertGreater(piped, n // 5, "too few inputs went through the pipeline to test it")


DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}


def random_png(rng):
    """A valid PNG of a random kind, size, chunking and compression, with ancillary chunks."""
    colour = rng.choice(sorted(DEPTHS))
    depth = rng.choice(DEPTHS[colour])
    before = [(b"PLTE", rng.randbytes(3 << depth))] if colour == 3 else []
    before += [(b"tEXt", b"k\x00" + rng.randbytes(rng.randint(0, 8)))] * rng.randint(0, 1)
    after = [(b"tEXt", b"a\x00b")] * rng.randint(0, 1)
    return png(rng.randint(1, 40), rng.randint(1, 20), colour, depth, seed=rng.randrange(1 << 30),
               idat_size=rng.choice((None, 1, 7, 64, 500)), before=before, after=after, level=rng.choice((0, 1, 6, 9)))


if __name__ == "__main__":
    unittest.main()
