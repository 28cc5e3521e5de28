"""Position IDs that arithmetic tasks supply beside their tokens: Abacus and position coupling.

Both are pure functions of a written example, so frozen evaluation sets and training batches
give the same IDs for the same tokens.

* **Abacus** (McLeish et al. 2024, mcleish7/arithmetic ``abacus.py``, ``Abacus.helper``): a
  digit's index within its run of consecutive digits, from 1; every other token 0. Written least
  significant digit first, digits of equal significance then share an ID.
* **Position coupling** (Cho et al. 2024, HanseulJo/position-coupling
  ``src/data/addition.py``, ``AdditionDatasetWithCoupledPositions.__getitem__``): with start s
  (1 here; the model draws it in training) and W the wider operand's written width, a digit of
  significance i gets s + W - i, in either operand and in the sum (whose top digit, i = W, gets
  s); ``+`` and the ``=`` slot (our BOS) get s + W + 1. Reversing a number reverses its IDs
  with its digits, as the authors' ``reverse_input``/``reverse_output`` do.
"""

from __future__ import annotations

import numpy as np

COUPLING_START = 1  # the authors' start at test time


def digit_runs(is_digit_BxL: np.ndarray) -> np.ndarray:
    """``[B, L]`` int32: each digit's index (from 1) within its run of digits; 0 elsewhere."""
    index = np.arange(is_digit_BxL.shape[1])[None, :]
    last_other = np.maximum.accumulate(np.where(is_digit_BxL, -1, index), axis=1)
    return np.where(is_digit_BxL, index - last_other, 0).astype(np.int32)


def abacus_ids(source_is_digit_BxS: np.ndarray, target_is_digit_BxT: np.ndarray,
               ) -> tuple[np.ndarray, np.ndarray]:
    """Abacus IDs of the source ``[B, S]`` and of the decoder's input slots ``[B, T + 1]``
    (BOS, then the target's tokens: the run count starts afresh after BOS)."""
    slots = np.concatenate([np.zeros((len(target_is_digit_BxT), 1), bool), target_is_digit_BxT],
                           axis=1)
    return digit_runs(source_is_digit_BxS), digit_runs(slots)


def coupled_ids(source_significance_BxS: np.ndarray, source_is_plus_BxS: np.ndarray,
                target_significance_BxT: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coupled IDs of the source ``[B, S]`` and of the decoder's input slots ``[B, T + 1]``.

    ``*_significance``: each digit's significance (0 for the units), -1 for other tokens and
    padding.
    """
    width_B = np.max(source_significance_BxS, axis=1) + 1
    top_B = (COUPLING_START + width_B)[:, None]
    source = np.where(source_significance_BxS >= 0, top_B - source_significance_BxS, 0)
    source = np.where(source_is_plus_BxS, top_B + 1, source)
    digits = np.where(target_significance_BxT >= 0, top_B - target_significance_BxT, 0)
    return (source.astype(np.int32),
            np.concatenate([top_B + 1, digits], axis=1).astype(np.int32))
