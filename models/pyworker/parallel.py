"""How a diffusers pipeline's transformer uses a Task's ranks (the layouts of ranks.py).

ulysses-N: diffusers' own context parallelism (ContextParallelConfig(ulysses_degree=N)): each
    rank holds 1/N of the sequence, attention trades heads for sequence with all-to-alls (four
    a layer). Pays off for long sequences only (docs/GPU.md, "Several GPUs").
cfg-2: the two classifier-free-guidance branches on two ranks, which diffusers lacks: rank 0
    runs the transformer for "cond", rank 1 for "uncond", and each step's two outputs are
    swapped with one all_gather. Every rank then holds both, combines them as the pipeline
    does, and steps the scheduler itself, so the latents stay identical on both ranks and the
    bytes equal the one-GPU run's (same kernels, same order of operations per branch).

The pipelines name the branch they are about to run with transformer.cache_context("cond" /
"uncond") (WanPipeline, QwenImageEditPlusPipeline in diffusers 0.42.1), always "cond" first;
CFGParallel listens to that. Whether a job runs both branches at all is the family's rule
(guidance > 1, a negative prompt...), so the adapter calls begin(active) before each call.
"""


class CFGParallel:
    """Splits a transformer's cond/uncond calls across two ranks (see the module doc)."""

    BRANCHES = ("cond", "uncond")

    def __init__(self, transformer, rank, dist, torch):
        if rank not in (0, 1):
            raise ValueError("cfg-2 has ranks 0 and 1, not %d" % rank)
        self.rank, self.dist, self.torch = rank, dist, torch
        self.own = self.BRANCHES[rank]
        self.active = False
        self.branch = None
        self.step = []  # this step's (branch, tensor) so far: the own output or a placeholder
        self.seen = self.ran = 0  # the job's transformer calls, and those this rank computed
        self._context = transformer.cache_context
        self._forward = transformer.forward
        # Instance attributes shadow the class's methods; nn.Module.__call__ calls self.forward.
        transformer.cache_context = self.cache_context
        transformer.forward = self.forward

    def begin(self, active):
        """Before a pipeline call: whether it runs both branches (the family's rule)."""
        self.active, self.step, self.seen, self.ran = active, [], 0, 0

    def report(self):
        return "cfg-2: this rank computed %d of the call's %d transformer calls" % (self.ran, self.seen)

    def cache_context(self, name, *args, **kwargs):
        self.branch = name
        return self._context(name, *args, **kwargs)

    def forward(self, *args, **kwargs):
        self.seen += 1
        if not self.active:
            self.ran += 1
            return self._forward(*args, **kwargs)
        if self.branch not in self.BRANCHES or kwargs.get("return_dict", True):
            raise RuntimeError("cfg-2 needs the pipeline's cache_context('cond'/'uncond') calls with "
                               "return_dict=False; got branch %r" % (self.branch,))
        if self.branch == self.own:
            self.ran += 1
            out = self._forward(*args, **kwargs)[0]
        else:
            # Filled in place by the exchange below, before the pipeline reads it (it combines
            # the branches only after both calls of the step).
            hs = kwargs["hidden_states"]
            out = self.torch.empty(hs.shape, dtype=hs.dtype, device=hs.device)
        self.step.append((self.branch, out))
        if len(self.step) == 2:
            self._exchange()
        return (out,)

    def _exchange(self):
        (b0, t0), (b1, t1) = self.step
        self.step = []
        if (b0, b1) != self.BRANCHES:
            raise RuntimeError("cfg-2: a step called the transformer for %s, %s; expected cond, uncond" % (b0, b1))
        mine, theirs = (t0, t1) if self.own == "cond" else (t1, t0)
        if mine.shape != theirs.shape or mine.dtype != theirs.dtype:
            raise RuntimeError("cfg-2: the transformer's output %s %s is not shaped like its input %s %s"
                               % (tuple(mine.shape), mine.dtype, tuple(theirs.shape), theirs.dtype))
        got = [self.torch.empty_like(mine) for _ in range(2)]
        self.dist.all_gather(got, mine.contiguous())
        theirs.copy_(got[1 - self.rank])


def apply(pipe, layout, rank, torch):
    """Applies a layout to pipe.transformer on this rank; returns the CFGParallel (cfg-2) or
    None."""
    from .ranks import parse_layout

    kind, degree = parse_layout(layout)
    if kind == "single":
        return None
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() != degree:
        raise RuntimeError("layout %s needs %d ranks in a started group" % (layout, degree))
    if kind == "cfg":
        return CFGParallel(pipe.transformer, rank, dist, torch)
    from diffusers import ContextParallelConfig

    # ulysses_anything: a sequence (or head count) the degree does not divide is split unevenly
    # instead of failing an assertion. Qwen-Image splits its prompt's tokens, whose count
    # varies by prompt, and MiniMax-H3's packed sequence has no padding; diffusers' own `run`
    # command always sets it. Where the degree divides, the split is the even one.
    pipe.transformer.enable_parallelism(config=ContextParallelConfig(ulysses_degree=degree, ulysses_anything=True))
    return None
