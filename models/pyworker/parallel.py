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


class Branches:
    """A transformer whose cond/uncond calls are intercepted: the pipeline names the branch it
    is about to run with cache_context, and forward sees it. The family says before each call
    whether it runs both branches (begin); outside that, calls pass straight through."""

    BRANCHES = ("cond", "uncond")

    def __init__(self, transformer, torch):
        self.torch = torch
        self.active = False
        self.branch = None
        self.step = []  # this step's (branch, output, call kwargs) so far
        self.seen = self.ran = 0  # the job's transformer calls, and the forward passes run
        self._context = transformer.cache_context
        self._forward = transformer.forward
        # Instance attributes shadow the class's methods; nn.Module.__call__ calls self.forward.
        transformer.cache_context = self.cache_context
        transformer.forward = self.forward

    def begin(self, active):
        """Before a pipeline call: whether it runs both branches (the family's rule)."""
        self.active, self.step, self.seen, self.ran = active, [], 0, 0

    def cache_context(self, name, *args, **kwargs):
        self.branch = name
        return self._context(name, *args, **kwargs)

    def forward(self, *args, **kwargs):
        self.seen += 1
        if not self.active:
            self.ran += 1
            return self._forward(*args, **kwargs)
        if args or self.branch not in self.BRANCHES or kwargs.get("return_dict", True):
            raise RuntimeError("%s needs the pipeline's cache_context('cond'/'uncond') calls with keyword arguments "
                               "and return_dict=False; got branch %r" % (self.name, self.branch))
        if len(self.step) != self.BRANCHES.index(self.branch):
            raise RuntimeError("%s: a step called the transformer for %s; expected cond, uncond" % (
                self.name, ", ".join([b for b, _, _ in self.step] + [self.branch])))
        # The branch's output is a placeholder, filled in place once the step's two calls are
        # in (the pipelines combine the branches only after both calls of the step). NaN, so
        # that a pipeline reading it before then (or an exchange that never filled it) makes
        # non-finite output, which the worker refuses, instead of whatever memory held.
        hs = kwargs["hidden_states"]
        out = self.torch.full(hs.shape, float("nan"), dtype=hs.dtype, device=hs.device)
        self.step.append((self.branch, out, kwargs))
        if len(self.step) == 2:
            (_, cond, ck), (_, uncond, uk) = self.step
            self.step = []
            self.complete(cond, ck, uncond, uk)
        return (out,)

    def own(self, kwargs):
        """One branch's own forward pass, checked to be shaped like its input."""
        self.ran += 1
        out = self._forward(**kwargs)[0]
        hs = kwargs["hidden_states"]
        if out.shape != hs.shape or out.dtype != hs.dtype:
            raise RuntimeError("%s: the transformer's output %s %s is not shaped like its input %s %s"
                               % (self.name, tuple(out.shape), out.dtype, tuple(hs.shape), hs.dtype))
        return out


class CFGParallel(Branches):
    """Splits a transformer's cond/uncond calls across two ranks (see the module doc)."""

    name = "cfg-2"

    def __init__(self, transformer, rank, dist, torch):
        if rank not in (0, 1):
            raise ValueError("cfg-2 has ranks 0 and 1, not %d" % rank)
        super().__init__(transformer, torch)
        self.rank, self.dist = rank, dist

    def report(self):
        return "cfg-2: this rank computed %d of the call's %d transformer calls" % (self.ran, self.seen)

    def complete(self, cond, cond_kwargs, uncond, uncond_kwargs):
        if self.rank == 0:
            cond.copy_(self.own(cond_kwargs))
        else:
            uncond.copy_(self.own(uncond_kwargs))
        self._exchange(cond, uncond)

    def _exchange(self, cond, uncond):
        """Each rank's own branch to both ranks: one all_gather."""
        got = [self.torch.empty_like(cond) for _ in range(2)]
        self.dist.all_gather(got, cond if self.rank == 0 else uncond)
        cond.copy_(got[0])
        uncond.copy_(got[1])


class CFGBatch(Branches):
    """cfg-batch: a step's two branches as one forward pass over a batch of two on one GPU
    (the cond inputs first), instead of two passes over a batch of one. Every tensor argument
    is concatenated along the batch; any other argument must be the same in both calls. The
    bytes differ from the two-pass run's (other matrix shapes, other kernels) but repeat."""

    name = "cfg-batch"

    def report(self):
        return "cfg-batch: %d forward passes for the call's %d transformer calls" % (self.ran, self.seen)

    def complete(self, cond, cond_kwargs, uncond, uncond_kwargs):
        torch = self.torch
        if set(cond_kwargs) != set(uncond_kwargs):
            raise RuntimeError("cfg-batch: the branches' arguments differ: %s against %s" % (
                sorted(cond_kwargs), sorted(uncond_kwargs)))
        both = {}
        for key, a in cond_kwargs.items():
            b = uncond_kwargs[key]
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
                if a.shape != b.shape or a.dtype != b.dtype:
                    raise RuntimeError("cfg-batch: %s is %s %s in one branch and %s %s in the other" % (
                        key, tuple(a.shape), a.dtype, tuple(b.shape), b.dtype))
                both[key] = torch.cat([a, b])
            elif a is b or a == b:
                both[key] = a
            else:
                raise RuntimeError("cfg-batch: the branches differ in %s (%r against %r)" % (key, a, b))
        self.ran += 1
        out = self._forward(**both)[0]
        n = cond.shape[0]
        if out.shape[0] != 2 * n or out.shape[1:] != cond.shape[1:]:
            raise RuntimeError("cfg-batch: the batched output is %s, expected two of %s" % (tuple(out.shape), tuple(cond.shape)))
        cond.copy_(out[:n])
        uncond.copy_(out[n:])


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
