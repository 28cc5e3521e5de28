"""pe_research: positional encodings and length extrapolation in JAX/Flax NNX.

The short public API (imported on first use, so ``import pe_research`` stays cheap)::

    from pe_research import load_config, train, load_run, evaluate, compare_runs

    config = load_config("configs/default.py", ["--config.model.pe.type=alibi"])
    train(config, "runs/copy_alibi")                  # train (or resume) a run directory
    train_ensemble([config_seed0, config_seed1], ["runs/s0", "runs/s1"])  # seeds in one program
    run = load_run("runs/copy_alibi", "best")         # restore it on the devices present
    result = evaluate(run, lengths=range(1, 65))      # one row per length, every metric
    result.plot()                                     # a matplotlib Figure
    compare_runs(["runs/copy_alibi", "runs/copy_rope"], "runs/comparison").plot()
    export_run("runs/copy_alibi", "copy_alibi.safetensors")   # the weights, for elsewhere

The math of every scheme is in ``pe_research.positional`` (``sinusoidal``, ``apply_rope``,
``alibi_slopes``, ``t5_relative_bucket``, ...).
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what IDEs and type checkers see; at run time each is imported on first use
    from pe_research.config.files import load_config
    from pe_research.evaluation.compare import compare_runs
    from pe_research.evaluation.members_eval import evaluate_members
    from pe_research.evaluation.range_eval import evaluate_run as evaluate
    from pe_research.runs.export import export_run
    from pe_research.runs.restore import load_run
    from pe_research.training.ensemble import train_ensemble
    from pe_research.training.loop import train

try:
    __version__ = importlib.metadata.version("pe_research")
except importlib.metadata.PackageNotFoundError:  # run from a checkout that was not installed
    __version__ = "0+unknown"

_PUBLIC = {
    "load_config": ("pe_research.config.files", "load_config"),
    "train": ("pe_research.training.loop", "train"),
    "train_ensemble": ("pe_research.training.ensemble", "train_ensemble"),
    "load_run": ("pe_research.runs.restore", "load_run"),
    "evaluate": ("pe_research.evaluation.range_eval", "evaluate_run"),
    "evaluate_members": ("pe_research.evaluation.members_eval", "evaluate_members"),
    "compare_runs": ("pe_research.evaluation.compare", "compare_runs"),
    "export_run": ("pe_research.runs.export", "export_run"),
}
__all__ = ["compare_runs", "evaluate", "evaluate_members", "export_run", "load_config",
           "load_run", "train", "train_ensemble"]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'pe_research' has no attribute {name!r}")
    module, attribute = _PUBLIC[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
