"""gpucheckup: a performance check-up for PyTorch GPU training jobs.

    import gpucheckup
    c = gpucheckup.analyze("trace.json.gz")   # the typed check-up (gpucheckup/api.py)
    print(c.verdict, c.figures["busy_pct"], c.fixes[0].action)

Importing gpucheckup imports nothing else: the API loads the pipeline when first called.
"""

from importlib import import_module

__version__ = "0.1.0"
_API = ("CheckUp", "Finding", "Fix", "FIGURES", "VERDICTS")
# Loaded by name when first used: every layer (capture, inside the user's job, too) imports __version__ from
# here, so this module may not import the pipeline's layers itself.
_API_MODULE = "gpucheckup.api"


def analyze(path, **mfu):
    """Check up a trace, a folder of per-rank traces or a run directory: a gpucheckup.api.CheckUp (verdict,
    findings, fixes, figures, and the typed document that --json writes)."""
    return import_module(_API_MODULE).analyze(path, **mfu)


def __getattr__(name):
    if name in _API:
        return getattr(import_module(_API_MODULE), name)
    raise AttributeError(f"module 'gpucheckup' has no attribute {name!r}")
