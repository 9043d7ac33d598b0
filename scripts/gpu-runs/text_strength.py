#!/usr/bin/env python3
"""How strongly an L0 bundle's text conditioning separates the two guidance branches, and what
that does to parity's margins: one load of a family's worker at the row's pinned shape (engine
eager, as faults.py), then for each way of strengthening the transformer's text conditioning in
place (LEVERS, cumulative weights restored between them), parity's reference and fp32 floor
measured again and the guidance-branch faults (and the other faults but fused-scale) figured
against them. Prints, per lever, how far the conditional prediction is from the unconditional
one (eager bf16) and each fault's largest figure/bound ratio and on which quantity; writes it
all as JSON.
  python3 scripts/gpu-runs/text_strength.py OUT.json qwenimage|wan LEVER,... ADAPTER-ARGS...
"""
import importlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))

from pyworker import faults, parity  # noqa: E402

FAULTS = ("branch-duplicated", "branch-lost", "attention-half", "rope-shifted")


def levers(family):
    """{name: (what, fn(transformer) -> restore)}: each sets some of the text stream's weights."""

    def setter(pick):
        def apply(t):
            kept = []
            for w, new in pick(t):
                kept.append((w, w.data.clone()))
                w.data.copy_(new(w.data))
            return lambda: [w.data.copy_(old) for w, old in kept]
        return apply

    if family == "qwenimage":
        blocks = lambda t: t.transformer_blocks  # noqa: E731
        k = lambda g: setter(lambda t: [(b.attn.norm_added_k.weight, lambda d: d * 0 + g) for b in blocks(t)])  # noqa: E731
        v = lambda g: setter(lambda t: [(p, lambda d: d * g) for b in blocks(t) for p in (b.attn.add_v_proj.weight, b.attn.add_v_proj.bias)])  # noqa: E731
    else:
        blocks = lambda t: t.blocks  # noqa: E731
        k = lambda g: setter(lambda t: [(b.attn2.norm_k.weight, lambda d: d * 0 + g) for b in blocks(t)])  # noqa: E731
        v = lambda g: setter(lambda t: [(p, lambda d: d * g) for b in blocks(t) for p in (b.attn2.to_v.weight, b.attn2.to_v.bias)])  # noqa: E731

    def both(a, b):
        def apply(t):
            ua, ub = a(t), b(t)
            return lambda: (ub(), ua())
        return apply

    return {"base": lambda t: (lambda: None), "k3": k(3.0), "k4": k(4.0), "v2": v(2.0), "v4": v(4.0), "k3v2": both(k(3.0), v(2.0)),
            "k3v4": both(k(3.0), v(4.0))}


def main(argv):
    out, family, names, args = argv[0], argv[1], argv[2].split(","), argv[3:]
    adapter = importlib.import_module(family + ".adapter")
    cfg = adapter.parse_args(args + ["--engine", "eager"], os.environ)
    b = adapter.DiffusersBackend(cfg)
    table = levers(family)
    got = []
    for name in names:
        restore = table[name](b.pipe.transformer)
        try:
            reference, fp32 = b.parity_reference(b.pipe)
            row = {"lever": name, "cond_to_uncond": parity.relative_l2(reference["cond"], reference["uncond"]),
                   "floors": {q: parity.relative_l2(reference[q], fp32[q]) for q in parity.QUANTITIES}, "faults": {}}
            for f in FAULTS:
                undo = faults.inject(f, b, b.pipe, b.torch)
                try:
                    fig = b.parity_served(b.pipe, reference, fp32, f)
                finally:
                    undo()
                ratios = {q: fig[parity.PREFIX[q] + "fp32_served"] / fig[parity.PREFIX[q] + "bound"] for q in parity.QUANTITIES}
                ratios["latents"] = fig["max_abs_fp32_served"] / fig["max_abs_bound"]
                best = max(ratios, key=ratios.get)
                row["faults"][f] = {"ratios": ratios, "best": best, "figures": fig}
            got.append(row)
            print("LEVER %s: cond-to-uncond %.4f; floors %s; %s" % (
                name, row["cond_to_uncond"], " ".join("%s %.4f" % kv for kv in row["floors"].items()),
                "; ".join("%s %.2f on %s (uncond %.2f)" % (f, r["ratios"][r["best"]], r["best"], r["ratios"]["uncond"])
                          for f, r in row["faults"].items())), flush=True)
        finally:
            restore()
    with open(out, "w") as f:
        json.dump(got, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
