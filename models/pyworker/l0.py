"""What every family's L0-random bundle builder shares (models/<family>/build_l0.py).

An L0 bundle has a checkpoint's real architecture and configs with random weights; it proves
mechanics, timing, memory and shapes, never quality. Nothing here knows a model.
"""

import json

# Every randomised parameter is drawn from N(0, INIT_STD) (VAEs keep their default init: drawn
# like the rest, they decode every latent to flat grey).
INIT_STD = 0.02

# Self-attention's q/k RMS-norm weights are set to this gain instead (models/<family>/build_l0.py):
# drawn like the rest (about 0.02) they make every logit about 0, attention a uniform average,
# and a runtime that attends over the wrong tokens or positions (a lost all-to-all, shifted
# rotary positions) computes nearly the same thing. Unit-RMS random q and k times the gain give
# logits of standard deviation about its square: sharp, as a trained model's, so it shows.
QK_NORM_GAIN = 2.0

MARKER = "L0-RANDOM.txt"  # the file that marks a bundle as random weights

# The word list the builders' made-in-code tokenizers are built from: enough of the fixture
# prompts' and instructions' words that they tokenise as words.
BASE_WORDS = (
    "a an the of in on at to with and or for from by over under into through across near above below "
    "is are was were be being has have its their his her it they he she we you this that these those "
    "red orange yellow green blue purple pink brown black white gray grey golden silver bright dark "
    "light small large big tiny huge old young new slow fast quiet loud soft warm cold wet dry "
    "cat dog fox bird fish horse cow sheep bear wolf rabbit deer lion tiger elephant whale dolphin "
    "man woman child person people boy girl astronaut robot car train boat ship plane bicycle "
    "tree forest flower grass field mountain river lake sea ocean beach wave sky cloud sun moon star "
    "rain snow wind fire smoke water ice city street road bridge house building window door room "
    "table chair cup ball book lamp candle clock camera screen light shadow night day morning evening "
    "walks runs jumps flies swims bounces rolls falls rises spins turns moves dances sings plays "
    "sits stands looks waves floats drifts glows flickers shines burns melts grows opens closes "
    "slowly quickly gently camera pan zoom close up wide shot view scene background foreground "
    "cinematic realistic photo video style detailed high quality motion time lapse aerial "
    "one two three four five many some all every each "
    ". , ! ? ' \" - : ; ( )"
).split()


def linear_params(i, o, bias=True):
    """Parameters of an i -> o linear layer."""
    return i * o + (o if bias else 0)


def sharpen_attention(modules, norms, what):
    """Sets the q/k norm weights (norms, attribute names) of each attention module to
    QK_NORM_GAIN; returns the marker's note on it (what: which modules, in words)."""
    n = 0
    for m in modules:
        for name in norms:
            getattr(m, name).weight.data.fill_(QK_NORM_GAIN)
            n += 1
    if n == 0:
        raise RuntimeError("no %s to sharpen" % what)
    return ("Attention drawn sharp: the %d q/k RMS-norm weights (%s of %s) are %g, not N(0, %g), so that "
            "attention over the wrong tokens or positions shows in parity." % (n, "/".join(norms), what, QK_NORM_GAIN, INIT_STD))


def open_gates(tables, dim, what):
    """Sets the residual gates of each (…, 6 * dim) modulation table (tables: tensors, their
    last dim the six chunks shift, scale, gate of attention then of the feed-forward) to 1:
    drawn like the rest, a gate of about 0.02 scales every attention's and feed-forward's
    contribution to the stream down to the bf16 rounding of the rest, and no fault in them
    shows. Returns the marker's note."""
    for t in tables:
        t.data[..., 2 * dim:3 * dim] = 1.0
        t.data[..., 5 * dim:6 * dim] = 1.0
    return "Residual gates open: the attention and feed-forward gates of %d modulation tables (%s) are 1." % (len(tables), what)


# The text stream's attention values (a joint-attention model's add_v_proj) are scaled by this
# gain after the draw (a power of two: exact in bf16). Drawn like the rest, the few prompt tokens
# among Qwen-Image-Edit's ~8,400 keys moved the prediction so little (its two guidance branches
# about 8 % apart on the pinned call, eager bf16 itself 3 % off fp32) that a guidance branch
# duplicated moved the unconditional prediction by barely more than its rounding: no quantity
# could refuse it with margin. Scaled, the prompt moves the prediction well past bf16's noise,
# as a trained model's text conditioning does (the gain is chosen for that, not calibrated on a
# trained checkpoint).
TEXT_VALUE_GAIN = 2.0


def strengthen_text(linears, what):
    """Scales each of linears (the text stream's value projections) by TEXT_VALUE_GAIN, weight
    and bias; returns the marker's note."""
    for m in linears:
        m.weight.data.mul_(TEXT_VALUE_GAIN)
        if m.bias is not None:
            m.bias.data.mul_(TEXT_VALUE_GAIN)
    if not linears:
        raise RuntimeError("no %s to strengthen" % what)
    return ("Text conditioning strengthened: the %d value projections of %s are %g x their draw, so that the prompt, and a "
            "guidance branch lost or duplicated, shows in parity." % (len(linears), what, TEXT_VALUE_GAIN))


def unit_norm(norm, what):
    """A final norm's weight set to 1 (drawn, about 0.02, it shrinks the text encoder's output, and
    with it the prompt's influence, to the bf16 rounding of the rest); returns the marker's note."""
    norm.weight.data.fill_(1.0)
    return "The %s's weight is 1, so that the prompt moves the prediction." % what


def marker_text(checkpoint, builder, tiny, seed, init, sizes, notes=()):
    """The marker file's text: what the bundle is, how it was drawn (init), and that it never
    stands for the checkpoint's quality."""
    lines = [
        "L0-RANDOM: this bundle holds RANDOM weights, not %s." % checkpoint,
        "The architecture and configs are the real ones%s; %s, seed %d." % (" (TINY dims)" if tiny else "", init, seed),
        *notes,
        "Use it for mechanics, timing, memory and shapes only, never for quality: its outputs are noise,",
        "and no qualification status past `implemented` may rest on it.",
        "Built by %s (mediaqual)." % builder,
        "",
        "parameters: %s" % json.dumps(sizes, sort_keys=True),
    ]
    return "\n".join(lines) + "\n"
