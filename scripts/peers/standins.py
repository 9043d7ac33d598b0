"""Stand-ins for what the peers import that cannot run here: the GPU kernels and the model.

The peers' released packages are installed without their dependencies; everything else they
import on the paths the suite drives is real (torch, diffusers, imageio and its ffmpeg, PyAV,
OpenCV, SciPy, aiohttp, openai, huggingface_hub: scripts/peers/requirements.txt and the torch
venv). A name in STANDINS resolves to an inert stand-in: a module whose every attribute is a
stand-in class, callable, subscriptable and usable as a decorator. The model's forward itself is
stood in by sglang_peer.py and vllm_omni_peer.py, which hand the row's frames to the peer as the
tensors its pipeline returns. docs/EXTERNAL.md lists the same names (TestProfilesHoldToReleasedSource
holds the two lists equal).
"""
import importlib.abc
import importlib.machinery
import importlib.metadata
import sys
import types
import typing

# Top-level packages stood in, each for a reason docs/EXTERNAL.md gives. A name not here that is
# not installed fails its import, as it would (the peers guard their optional imports).
STANDINS = {
    # GPU kernels: sglang's, which nothing here can run (triton is torch's own, real, and finds no
    # GPU driver; flashinfer is not installed: the peers guard its import).
    "sgl_kernel": "gpu",
    # The model: transformers holds the text encoders (and the peers pin it apart: vllm-omni <5.15,
    # sglang 5.19); cache_dit accelerates the DiT's forward.
    "transformers": "model", "cache_dit": "model",
    # The language-model side of the serving stacks, imported at module top and called by no
    # diffusion route: structured-output grammars, LLM chat formats, a notebook display helper.
    "xgrammar": "llm", "llguidance": "llm", "openai_harmony": "llm", "mistral_common": "llm", "IPython": "llm",
}

# Class attributes with dunder names that the peers read off the stack's classes.
_DUNDERS = {"__class_validators__"}


class _Meta(type(typing.Protocol)):  # ABCMeta, and typing.Protocol's: the stack's classes mix with both
    def __new__(mcls, name, bases, ns, **kwargs):
        return super().__new__(mcls, name, bases, ns)

    def __init__(cls, name, bases, ns, **kwargs):
        super().__init__(name, bases, ns)

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__") and name not in _DUNDERS:
            raise AttributeError(name)
        return _stub(f"{cls.__qualname__}.{name}")

    def __getitem__(cls, item):
        return cls

    def __setitem__(cls, item, value):
        pass

    def register(cls, *args, **kwargs):  # transformers' AutoX.register(config, class)
        return args[-1] if args else None

    def __contains__(cls, item):
        return False

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False


class Stand(metaclass=_Meta):
    """Anything from the GPU stack: a class, a function, a decorator, a value."""

    def __init_subclass__(cls, **kwargs):
        pass

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):  # a field typed with a stand-in
        from pydantic_core import core_schema

        return core_schema.any_schema()

    def __init__(self, *args, **kwargs):
        pass

    def __new__(cls, *args, **kwargs):
        # Used as a decorator (@torch.no_grad, @torch.compile(...)): give the function back.
        if len(args) == 1 and not kwargs and isinstance(args[0], (types.FunctionType, type)):
            return args[0]
        return super().__new__(cls)

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return Stand()

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Stand()

    def __getitem__(self, item):
        return Stand()

    def __setitem__(self, item, value):
        pass

    def __contains__(self, item):
        return False

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _same(self, *args):
    return self


for _op in ("neg", "pos", "abs", "invert", "add", "radd", "sub", "rsub", "mul", "rmul", "truediv",
            "rtruediv", "floordiv", "rfloordiv", "mod", "pow", "rpow", "and", "rand", "or", "ror",
            "matmul", "lshift", "rshift"):
    setattr(Stand, f"__{_op}__", _same)
    setattr(_Meta, f"__{_op}__", _same)
for _k in (Stand, _Meta):
    _k.__int__ = _k.__index__ = _k.__len__ = lambda self: 0
    _k.__float__ = lambda self: 0.0
    _k.__lt__ = _k.__gt__ = _k.__le__ = _k.__ge__ = lambda self, other: False
    _k.__hash__ = object.__hash__
Stand.__eq__ = lambda self, other: isinstance(other, Stand)  # two stand-in values agree
_Meta.__eq__ = lambda cls, other: cls is other


def _stub(qualname):
    name = qualname.rsplit(".", 1)[-1]
    if name.endswith(("Error", "Exception", "Warning")):  # caught in except clauses: a real one
        return type(name, (Exception,), {"__qualname__": qualname, "__module__": "standins"})
    return _Meta(qualname.rsplit(".", 1)[-1], (Stand,), {"__qualname__": qualname, "__module__": "standins"})


# The peers' own GPU kernel and layer packages, which their configs import for quantization
# classes and nothing the HTTP layers answer with.
KERNELS = {"sglang.srt.layers", "sglang.kernels", "vllm.ir"}


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _stub(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


# The versions the peers' version checks read (importlib.metadata), as their pins require.
VERSIONS = {"transformers": "5.14.0"}


class _Dist(importlib.metadata.Distribution):
    def __init__(self, name):
        self._name = name

    def read_text(self, filename):
        if filename == "METADATA":
            return f"Metadata-Version: 2.1\nName: {self._name}\nVersion: {VERSIONS.get(self._name, '0.0.0')}\n"
        return None

    def locate_file(self, path):
        return path


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        name = (context.name or "").replace("-", "_")
        if name in STANDINS:
            return iter([_Dist(name)])
        return iter(())

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] in STANDINS or any(fullname == p or fullname.startswith(p + ".") for p in KERNELS):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _Module(spec.name)
        m.__path__ = []
        m.__version__ = "0.0.0+standin"
        return m

    def exec_module(self, module):
        pass


def install():
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
