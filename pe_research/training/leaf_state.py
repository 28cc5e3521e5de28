"""A train step called on the leaves of its state: between calls the step loop holds a flat
list of arrays, not NNX pytrees, so a call does no Python work per variable.

Flattening an ``nnx.State`` and rebuilding its ``Variable`` objects runs in Python, once for the
arguments and once for the results of every call: for the default model's 197 leaves
(parameters and Adam's two moments) about 1-1.5 ms of host time per call on a 2-core CPU, more
than that model's whole step takes on an H200 (0.67 ms of device time). A flat list crosses
``jax.jit`` in its C++ path.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax


@dataclasses.dataclass(frozen=True, eq=False)
class OverLeaves:
    """``step`` (a ``Keyed`` train step, ``(params, opt_state, *args) -> (params, opt_state,
    metrics)``) as ``(leaves, *args) -> (leaves, metrics)`` for states of structure ``treedef``
    (that of ``(params, opt_state)``): the step's own program inside one more ``jax.jit``, which
    donates the leaves as the step donates its state, and takes the step's trailing arguments
    (keys, learning rates) as arguments, so a run's seed stays out of the program."""

    step: Any
    treedef: jax.tree_util.PyTreeDef
    jitted: Any = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        def on_leaves(leaves: list[jax.Array], *args: Any) -> tuple[list[jax.Array], Any]:
            params, opt_state = jax.tree.unflatten(self.treedef, leaves)
            params, opt_state, metrics = self.step.jitted(params, opt_state, *args)
            leaves, treedef = jax.tree.flatten((params, opt_state))
            if treedef != self.treedef:  # at trace time only
                raise ValueError("the train step returned a state of another structure than "
                                 "it was given; its leaves cannot be carried to the next call")
            return leaves, metrics

        # named as the step: its compilation-cache entries and profiles read jit_train_step...
        on_leaves.__name__ = on_leaves.__qualname__ = getattr(self.step.jitted, "__name__",
                                                              "train_step")
        object.__setattr__(self, "jitted", jax.jit(on_leaves, donate_argnums=(0,)))

    def __call__(self, leaves: list[jax.Array], *args: Any) -> tuple[list[jax.Array], Any]:
        return self.jitted(leaves, *args, *self.step.trailing)


def to_leaves(params: Any, opt_state: Any) -> tuple[list[jax.Array], jax.tree_util.PyTreeDef]:
    """The state's leaves and the structure that rebuilds it (``jax.tree.unflatten``)."""
    return jax.tree.flatten((params, opt_state))
