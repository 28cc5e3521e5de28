"""The checks of an ensemble's members before anything is built: what they may differ in, and
one parameter shape for all."""

from __future__ import annotations

from collections.abc import Sequence

import ml_collections
from flax import nnx

from pe_research.config import flat_config, to_dict
from pe_research.config.stacking import first_difference, stacked, stacked_keys_text
from pe_research.core.errors import ConfigError
from pe_research.model.factory import abstract_model
from pe_research.model.padded_vocab import shapes_of


def check_members(configs: Sequence[ml_collections.ConfigDict]) -> None:
    """ConfigError unless the members differ only in ``stacking.STACKED_KEYS`` (and in them:
    no two members alike)."""
    if not configs:
        raise ConfigError("members", (), "an ensemble needs at least one member")
    first = to_dict(configs[0])
    for index, config in enumerate(configs[1:], 1):
        key = first_difference(first, to_dict(config))
        if key is not None:
            flat_first, flat_other = flat_config(first), flat_config(to_dict(config))
            raise ConfigError(key, flat_other.get(key), f"member {index} differs from member 0 "
                              f"({flat_first.get(key)!r}); members of one program may differ "
                              f"only in {stacked_keys_text()}")
    flats = [flat_config(to_dict(c)) for c in configs]
    runs = [repr([(key, value) for key, value in sorted(flat.items())
                  if stacked(key, flat) and not key.startswith("wandb.")]) for flat in flats]
    if len(set(runs)) != len(runs):
        raise ConfigError("seed", [int(c.seed) for c in configs], "members need distinct seeds "
                          "(or optimizer settings, dropout rates, wavelength bases, scalings, "
                          "randomized ranges, tasks or lengths)")


def member_shapes(configs: Sequence[ml_collections.ConfigDict],
                  vocab_sizes: Sequence[int]) -> None:
    """ConfigError unless every member's model, built at the widest vocabulary, has the same
    parameter shapes (the program is one graph)."""
    width = max(vocab_sizes)
    reference = None
    checked = set()  # members whose model blocks are alike (seeds, tasks) build one model
    for index, config in enumerate(configs):
        block = repr(sorted(flat_config(to_dict(config.model)).items()))
        if block in checked:
            continue
        checked.add(block)
        shapes = shapes_of(nnx.state(abstract_model(config, width), nnx.Param))
        if reference is None:
            reference = shapes
        elif shapes != reference:
            raise ConfigError("members", index, "member's parameter shapes differ from member "
                              "0's; members of one program share the model's shapes")
