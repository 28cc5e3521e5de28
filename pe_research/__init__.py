"""pe_research: positional encodings and length extrapolation in JAX/Flax NNX.

The short public API (imported on first use, so ``import pe_research`` stays cheap)::

    from pe_research import load_config, train, load_run, evaluate, compare_runs

    config = load_config("configs/default.py", ["--config.model.pe.type=alibi"])
    train(config, "runs/copy_alibi")                  # train (or resume) a run directory
    train_ensemble([config_seed0, config_seed1], ["runs/s0", "runs/s1"])  # seeds in one program
    run = load_run("runs/copy_alibi", "best")         # restore it on the devices present
    result = evaluate(run, lengths=range(1, 65))      # one row per length, every metric
    compare_runs(["runs/copy_alibi", "runs/copy_rope"], "runs/comparison")

The math of every scheme is in ``pe_research.positional`` (``sinusoidal``, ``apply_rope``,
``alibi_slopes``, ``t5_relative_bucket``, ...).
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "load_config": "pe_research.config.files",
    "train": "pe_research.training.loop",
    "train_ensemble": "pe_research.training.ensemble",
    "evaluate_members": "pe_research.evaluation.range_eval",
    "load_run": "pe_research.runs.restore",
    "evaluate": ("pe_research.evaluation.range_eval", "evaluate_run"),
    "compare_runs": "pe_research.evaluation.compare",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'pe_research' has no attribute {name!r}")
    module, attribute = _PUBLIC[name] if isinstance(_PUBLIC[name], tuple) else (_PUBLIC[name],
                                                                                 name)
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value
