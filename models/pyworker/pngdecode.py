"""An uploaded PNG decoded by Pillow, with its inflate on a second core.

Pillow decodes a PNG on one thread: zlib's inflate, then each row's unfiltering. An edit's Task
needs the pixels before its first call, so at concurrency 1 the whole decode is in the job's
latency: 25-53 ms p50 for the 1024² uploads on the H200 hosts, 40-50 % of it inflate
(scripts/gpu-runs/decode.py; 15-32 ms this way). Here Python's zlib inflates the IDAT data on
a second thread and passes the rows on, as they come, as stored (uncompressed) deflate blocks in
the IDAT chunks of a PNG that Pillow reads as it grows: Pillow's own decoder unfilters rows while the
rest is still being inflated. Every other byte Pillow reads is the upload's own, so the pixels
and the errors are Pillow's; an upload this path does not take (interlaced, animated, chunks
that do not fit) or cannot carry through is decoded by Pillow from its own bytes, whose verdict
stands. test_pngdecode.py holds the two to each other, on mutated files too.
"""

import io
import struct
import threading
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Compressed bytes inflated at a time: the grain at which rows reach Pillow.
SLICE = 1 << 15
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # PNG colour type -> samples a pixel
WAIT = 30  # seconds a read waits for the inflater at most


def decode(data, log=None):
    """The image in data as a loaded Pillow image (OSError when Pillow cannot decode it): a PNG
    the pipeline takes through it, anything else (JPEG, WebP, ...) by Pillow alone."""
    plan = layout(data)
    if plan is not None:
        try:
            return pipelined(data, *plan)
        except Exception as e:  # Pillow alone, on the upload's bytes, decides
            if log:
                log("reference: the pipelined decode stopped (%s: %s); Pillow decodes it alone" % (type(e).__name__, e))
    return pillow(data)


def pillow(data):
    """Pillow's own decode of data, on this thread."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        im.load()
    return im


def layout(data):
    """(filtered, head, idats, rest) when data is a PNG the pipeline takes: the size of its
    filtered rows (from IHDR), its bytes before the first IDAT chunk, the (start, end) of each
    IDAT chunk's data in the first run of them, and where the bytes after that run start.
    None for anything else: not a PNG, interlaced, animated, no IDAT, a chunk running past the
    end."""
    if len(data) < 33 or data[:8] != SIGNATURE or data[8:16] != b"\x00\x00\x00\x0dIHDR":
        return None
    w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    if interlace != 0 or colour not in CHANNELS or depth not in (1, 2, 4, 8, 16) or w == 0 or h == 0:
        return None
    filtered = h * (1 + (w * CHANNELS[colour] * depth + 7) // 8)
    i, idats = 8, []
    while i + 8 <= len(data):
        n, cid = int.from_bytes(data[i:i + 4], "big"), data[i + 4:i + 8]
        end = i + 12 + n
        if end > len(data):
            return None
        if cid == b"IDAT":
            idats.append((i + 8, i + 8 + n))
        elif idats:
            break
        elif cid == b"acTL":
            return None
        i = end
    if not idats:
        return None
    return filtered, data[:idats[0][0] - 8], idats, idats[-1][1] + 4


def pipelined(data, filtered, head, idats, rest):
    """Pillow's decode of data fed by the inflater thread (layout's plan)."""
    from PIL import Image

    relay = Relay()
    relay.append(head)
    inflater = threading.Thread(target=inflate, args=(data, filtered, idats, rest, relay), daemon=True)
    inflater.start()
    try:
        with Image.open(relay, formats=["PNG"]) as im:
            im.load()
    finally:
        relay.close()
        inflater.join()
    return im


def inflate(data, filtered, idats, rest, relay):
    """Inflates the IDAT run up to the filtered rows IHDR implies (a stream that would inflate
    to more stops there, as Pillow's decoder does) and appends the rows as stored deflate in
    IDAT chunks, then the upload's bytes after the run. A stream that ends short, or does not
    inflate, ends the relay with that error."""
    err = None
    try:
        inflater, stored, left = zlib.decompressobj(), zlib.compressobj(0), filtered
        for start, end in idats:
            for at in range(start, end, SLICE):
                rows = inflater.decompress(data[at:min(at + SLICE, end)], left)
                left -= len(rows)
                if left == 0:
                    relay.append(chunk(b"IDAT", stored.compress(rows) + stored.flush()) + data[rest:])
                    return
                if rows and not relay.append(chunk(b"IDAT", stored.compress(rows) + stored.flush(zlib.Z_SYNC_FLUSH))):
                    return  # Pillow stopped reading
        err = EOFError("the image data ends %d bytes short of its rows" % left)
    except Exception as e:
        err = e
    finally:
        relay.finish(err)  # whatever happened: a reader never waits for bytes that will not come


def chunk(cid, payload):
    return struct.pack(">I", len(payload)) + cid + payload + struct.pack(">I", zlib.crc32(payload, zlib.crc32(cid)))


class Relay(io.RawIOBase):
    """A file one thread appends to and Pillow reads and seeks in: a read waits until the bytes
    it asks for are there or the writer has finished."""

    def __init__(self):
        super().__init__()
        self.buf, self.pos, self.done, self.err, self.stopped = bytearray(), 0, False, None, False
        self.cond = threading.Condition()

    def append(self, b):
        """Adds b; False once the reader has closed the relay."""
        with self.cond:
            if self.stopped:
                return False
            self.buf += b
            self.cond.notify()
            return True

    def finish(self, err=None):
        with self.cond:
            self.done, self.err = True, err
            self.cond.notify()

    def close(self):
        with self.cond:
            self.stopped = True
        super().close()

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=io.SEEK_SET):
        if whence == io.SEEK_END:
            self.wait(None)
            offset += len(self.buf)
        elif whence == io.SEEK_CUR:
            offset += self.pos
        self.pos = max(0, offset)
        return self.pos

    def wait(self, end):
        """Waits until buf reaches end (None: until finished); raises the writer's error when
        it finished short of that, and TimeoutError past WAIT (the writer always finishes, and
        soon; this is the bound should it not)."""
        with self.cond:
            if not self.cond.wait_for(lambda: self.done or (end is not None and len(self.buf) >= end), WAIT):
                raise TimeoutError("no image data for %d s" % WAIT)
            if self.err is not None and (end is None or len(self.buf) < end):
                raise self.err

    def read(self, n=-1):
        end = None if n is None or n < 0 else self.pos + n
        self.wait(end)
        with self.cond, memoryview(self.buf) as view:  # one copy, not a bytearray's and then bytes'
            b = bytes(view[self.pos:end])
        self.pos += len(b)
        return b
