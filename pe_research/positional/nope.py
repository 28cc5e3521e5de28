"""NoPE: no positional information at all (Kazemnejad et al. 2023).

Acts in: nothing. A causal decoder can still infer position from its mask; the bidirectional
encoder is permutation-equivariant.
"""

from __future__ import annotations

from pe_research.positional.base import PositionalScheme


class NoPE(PositionalScheme):
    """Every hook is the identity."""

    name = "none"
    acts_in = frozenset()
    relative = True
    consumes_positions = False
