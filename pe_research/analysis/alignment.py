"""Aligned attention: the weight a decoder-only model's output queries put on the source token
each output reproduces (copy: source j for output j; reverse_string: source n-1-j;
duplicate_string: source j mod n).

A decoder-only model reads ``[source (n tokens), SEP, target]`` packed (``model/
single_stack.py``): the query at index n + j (target slot j) predicts target token j.
For copy, the aligned key is then n tokens back at every output: a head that copies by position
must attend at distance n, a distance the model never saw beyond the training lengths.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pe_research.errors import UsageError

# Source index that target token j reproduces, at task length n.
ALIGNED_SOURCE: dict[str, Callable[[int, int], int]] = {
    "copy": lambda n, j: j,
    "reverse_string": lambda n, j: n - 1 - j,
    "duplicate_string": lambda n, j: j % n,
}


def check_alignable(task: str, architecture: str) -> None:
    """A one-line UsageError unless the task has an aligned source and the model one stack."""
    if task not in ALIGNED_SOURCE:
        raise UsageError(f"task {task!r} has no aligned source token; aligned attention is "
                         f"defined for {', '.join(sorted(ALIGNED_SOURCE))}")
    if architecture != "decoder_only":
        raise UsageError(f"model.architecture={architecture!r}: aligned attention reads the "
                         "self-attention of a decoder-only model; give a decoder_only run")


def aligned_pairs(batch: Mapping[str, Any], task: str,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(example, query, key, target)`` index arrays, one entry per target token j before EOS:
    the joint-sequence slot predicting target token j, the source token's slot it reproduces,
    and j itself."""
    sources = np.asarray(batch["source_mask"], bool).sum(axis=-1)
    outputs = np.asarray(batch["target_mask"], bool).sum(axis=-1) - 1  # the last predicts EOS
    pairs = [(b, int(n) + j, ALIGNED_SOURCE[task](int(n), j), j)
             for b, (n, m) in enumerate(zip(sources, outputs, strict=True)) for j in range(int(m))]
    if not pairs:
        raise UsageError("the batch has no target tokens to align")
    return tuple(np.array(column) for column in zip(*pairs, strict=True))


def aligned_weights(sites: Sequence[Mapping[str, Any]], batch: Mapping[str, Any],
                    task: str) -> np.ndarray:
    """``[layers, H]``: mean over examples and target tokens of the weight that the query
    predicting target token j puts on its aligned source token (``sites``: ``decompose`` of a
    decoder-only model on ``batch``)."""
    examples, queries, keys, _ = aligned_pairs(batch, task)
    return np.stack([np.asarray(site["weights"])[examples, :, queries, keys].mean(axis=0)
                     for site in sites])


def pointer(sites: Sequence[Mapping[str, Any]], batch: Mapping[str, Any], task: str,
            layer: int, head: int) -> dict[str, Any]:
    """Where one head's largest weight sits, over the target queries of ``batch``: the fraction
    on the aligned source token, and the distance back from the query (in tokens) it sits at
    most often, with that distance's share."""
    examples, queries, keys, _ = aligned_pairs(batch, task)
    weights = np.asarray(sites[layer]["weights"])[examples, head, queries]  # [P, S]
    largest = np.argmax(weights, axis=-1)
    distances, counts = np.unique(queries - largest, return_counts=True)
    return {"on_aligned": float(np.mean(largest == keys)),
            "modal_distance": int(distances[np.argmax(counts)]),
            "modal_share": float(np.max(counts) / len(largest))}
