"""What every family's L0-random bundle builder shares (models/<family>/build_l0.py).

An L0 bundle has a checkpoint's real architecture and configs with random weights; it proves
mechanics, timing, memory and shapes, never quality. Nothing here knows a model.
"""

import json

# Every randomised parameter is drawn from N(0, INIT_STD) (VAEs keep their default init: drawn
# like the rest, they decode every latent to flat grey).
INIT_STD = 0.02

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
