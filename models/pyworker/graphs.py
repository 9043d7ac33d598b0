"""CUDA graphs of a transformer's forward pass.

A denoising step launches thousands of small kernels from Python; when the host is slow for a
moment (another process, the interpreter), the GPU waits, and the Task's time varies with the
host. A CUDA graph records one forward pass's kernels once and replays them with one launch.
The replay runs the very kernels of the recorded call, in its order, so the bytes equal the
ungraphed run's of the same engine.

GraphedForward records one graph for each distinct signature of the call (the tensors' shapes,
dtypes and devices, and the other arguments' values), at its first call: for the row's pinned
shape, that is the warm-up before "ready". Every call copies its tensors into the graph's
static inputs, replays, and returns a copy of the outputs (the next replay overwrites them).
Up to `limit` graphs; later signatures run the plain forward.
"""


class GraphedForward:
    def __init__(self, forward, torch, limit=4):
        self._forward = forward
        self.torch = torch
        self.limit = limit
        self.graphs = {}  # signature -> (graph, static inputs, static outputs)
        self.pool = None  # one memory pool for all the graphs (their calls never overlap)
        self.recorded = self.replayed = self.plain = 0

    def signature(self, kwargs):
        torch = self.torch
        sig = []
        for k in sorted(kwargs):
            v = kwargs[k]
            if isinstance(v, torch.Tensor):
                sig.append((k, tuple(v.shape), v.dtype, str(v.device)))
            else:
                sig.append((k, repr(v)))
        return tuple(sig)

    def __call__(self, *args, **kwargs):
        torch = self.torch
        if args or kwargs.get("return_dict", True) or not any(
                isinstance(v, torch.Tensor) and v.is_cuda for v in kwargs.values()):
            self.plain += 1
            return self._forward(*args, **kwargs)
        sig = self.signature(kwargs)
        entry = self.graphs.get(sig)
        if entry is None:
            if len(self.graphs) >= self.limit:
                self.plain += 1
                return self._forward(**kwargs)
            entry = self.graphs[sig] = self.record(kwargs)
        graph, static, outs = entry
        for k, v in static.items():
            v.copy_(kwargs[k])
        graph.replay()
        self.replayed += 1
        return tuple(o.clone() for o in outs)

    def record(self, kwargs):
        torch = self.torch
        static = {k: v.clone() for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
        call = dict(kwargs, **static)
        # Lazy initialisation (cuBLAS handles, a compiled block's first run) must not happen
        # inside the capture: two plain calls on a side stream first, as PyTorch advises.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._forward(**call)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            outs = self._forward(**call)
        if self.pool is None:
            self.pool = graph.pool()
        if not isinstance(outs, tuple) or not all(isinstance(o, torch.Tensor) for o in outs):
            raise RuntimeError("graphs: the forward returned %s, not a tuple of tensors" % type(outs).__name__)
        self.recorded += 1
        return graph, static, outs

    def report(self):
        return "graphs: %d recorded, %d replays, %d plain calls" % (self.recorded, self.replayed, self.plain)
