"""Where an encoder-only model's answer slot looks: its weight on the input's first and last tokens.

An encoder-only model reads ``[source (n tokens), answer slots]`` packed (``model/
single_stack.py``), so the first input token sits at index 0, the last at n - 1 and the first
answer slot at n. On a task whose answer depends on both ends
(even_pairs: is the first token equal to the last), heads of the slot must find the last token,
its neighbour, and the first, n tokens back, at every length. These functions measure one head's
weight on each end and the mean position (in the scheme's position units) it attends to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from pe_research.model import single_stack


def slot_rows(sites: Sequence[Mapping[str, Any]], batch: Mapping[str, Any]) -> np.ndarray:
    """``[B, layers, H, W]``: the first answer slot's softmax weights over the joint sequence
    (``sites``: ``decompose`` of an encoder-only model on ``batch``)."""
    slot_B = np.asarray(batch["source_mask"], bool).sum(axis=-1)
    rows = np.arange(len(slot_B))
    return np.stack([np.asarray(site["weights"])[rows, :, slot_B, :] for site in sites], axis=1)


def end_indices(batch: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Joint-sequence indices ``[B]`` of each example's first and last input token."""
    count = np.asarray(batch["source_mask"], bool).sum(axis=-1)
    return np.zeros_like(count), count - 1


def joint_positions(batch: Mapping[str, Any], source_positions: Any,
                    target_positions: Any) -> np.ndarray:
    """``[B, W]`` position of every joint-sequence slot, as the model packs them
    (``single_stack.joint_positions`` of what ``batch_positions`` gives), one row per example."""
    joint = single_stack.joint_positions(jnp.asarray(source_positions),
                                         jnp.asarray(target_positions))
    return np.broadcast_to(np.asarray(joint), (np.asarray(batch["source"]).shape[0],
                                               joint.shape[1]))


def head_on(rows_BxLxHxW: np.ndarray, token_B: np.ndarray) -> tuple[int, int]:
    """The (layer, head) whose mean weight on the joint-sequence slots ``token_B`` (one per
    example: the first or the last input token) is largest."""
    on_token = rows_BxLxHxW[np.arange(len(token_B)), :, :, token_B].mean(axis=0)
    layer, head = np.unravel_index(int(np.argmax(on_token)), on_token.shape)
    return int(layer), int(head)


def follow_head(rows_BxLxHxW: np.ndarray, head: tuple[int, int], first_B: np.ndarray,
                last_B: np.ndarray, positions_BxW: np.ndarray) -> dict[str, float]:
    """One head's mean weight on the last token, on the last three, on the first, on the first
    three, the mean position it attends to, and the two ends' and the slot's mean positions."""
    weights = rows_BxLxHxW[:, head[0], head[1], :]
    rows = np.arange(len(last_B))
    keys = np.arange(weights.shape[1])[None, :]
    last3 = (keys >= (last_B - 2)[:, None]) & (keys <= last_B[:, None])
    first3 = (keys >= first_B[:, None]) & (keys <= np.minimum(first_B + 2, last_B)[:, None])
    return {"last": float(weights[rows, last_B].mean()),
            "last3": float((weights * last3).sum(axis=-1).mean()),
            "first": float(weights[rows, first_B].mean()),
            "first3": float((weights * first3).sum(axis=-1).mean()),
            "attended_position": float((weights * positions_BxW).sum(axis=-1).mean()),
            "last_position": float(positions_BxW[rows, last_B].mean()),
            "first_position": float(positions_BxW[rows, first_B].mean()),
            "slot_position": float(positions_BxW[rows, last_B + 1].mean())}


def trained_last_positions(max_position: int, lengths: Sequence[int], slots_after: int,
                           draws: int, seed: int = 0) -> np.ndarray:
    """Positions the last input token takes in training with randomized positions: for each
    length n (equally often), ``draws`` sorted draws of n + ``slots_after`` distinct positions
    from ``[0, max_position)``, the n-th smallest of each; ``[len(lengths) * draws]``."""
    rng = np.random.default_rng(seed)
    found = []
    for n in lengths:
        scores = rng.random((draws, max_position))
        chosen = np.sort(np.argsort(scores, axis=1)[:, :n + slots_after], axis=1)
        found.append(chosen[:, n - 1])
    return np.concatenate(found)
