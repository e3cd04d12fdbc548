"""rcutil: the code of the executable book on gradient descent for Transformers with
residual connections (Qin, Zhou, Jiang & Zhu, arXiv:2506.05249).

Importing the package has no side effects: it sets no thread count and no signal
handler (the entry points do, see :mod:`rcutil.entry`), and it loads torch only when
one of the names below is first used.
"""

#: The package's face, by the module that defines each name.
_MODEL = ("Transformer", "attention", "block", "ffn", "squared_loss")
_PROFILES = ("PROFILES", "active_profile", "settings_for")
_TRAIN = ("History", "TrainingDiverged", "gradient_descent")
__all__ = [*_MODEL, *_PROFILES, *_TRAIN]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _MODEL:
        from . import model as module
    elif name in _PROFILES:
        from . import profiles as module
    elif name in _TRAIN:
        from . import train as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
