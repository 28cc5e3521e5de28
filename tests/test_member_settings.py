"""The model's member settings: a wavelength base set on a model as a traced scalar (an ensemble
member's own) gives the outputs of a model built with that base, in every scheme that has one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_models import forward, random_inputs, spread_parameters, tiny_model

from pe_research.model.member_settings import (
    MODEL_SETTINGS,
    members_model_settings,
    set_member_settings,
)
from pe_research.positional.registry import SCHEMES, default_pe_config

WITH_WAVELENGTH = sorted(name for name in SCHEMES if "max_wavelength" in default_pe_config(name))
# RoPE's scaled frequencies are built from the base too
CASES = [(name, {}) for name in WITH_WAVELENGTH] + [
    ("rope", {"scaling": {"type": "yarn", "factor": 4.0, "original_max_position": 8}}),
    ("rope", {"scaling": {"type": "ntk", "factor": 4.0}}),
]


def test_the_schemes_with_a_wavelength_base():
    assert {"rope", "sinusoidal", "scaled_sinusoidal", "transformer_xl", "xpos",
            "pope"} <= set(WITH_WAVELENGTH)


@pytest.mark.parametrize(("scheme", "pe"), CASES,
                         ids=[name + ("-" + pe["scaling"]["type"] if pe else "")
                              for name, pe in CASES])
def test_a_traced_wavelength_base_gives_the_outputs_of_a_model_built_with_it(scheme, pe):
    """Model A built with base 500, model B with the default 10,000 (the same parameters): B
    with 500 set as an argument of the program equals A, and with 10,000 it does not."""
    built = {**pe, "scaling": {**default_pe_config(scheme).get("scaling", {}),
                               **pe.get("scaling", {})}} if pe else {}
    graph_a, state = spread_parameters(tiny_model(scheme, pe={**built, "max_wavelength": 500.0}))
    graph_b, state_b = spread_parameters(tiny_model(scheme, pe=built))
    assert jax.tree.structure(state) == jax.tree.structure(state_b)
    source, target = random_inputs(batch=2, source_len=9, target_len=7)

    @jax.jit
    def both(state, base):
        model_b = set_member_settings(nnx.merge(graph_b, state), {"max_wavelength": base})
        return forward(nnx.merge(graph_a, state), source, target, 3, 5), \
            forward(model_b, source, target, 3, 5)

    want, got = both(state, jnp.float32(500.0))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    want, other = both(state, jnp.float32(10_000.0))
    assert float(jnp.max(jnp.abs(other - want))) > 1e-3  # the base reaches the outputs


def test_members_carry_the_settings_they_differ_in_and_only_those():
    def config(rate: float, base: float | None):
        pe = {"type": "alibi"} if base is None else {"type": "rope", "max_wavelength": base}
        return {"model": {"dropout_rate": rate, "pe": pe}}

    assert members_model_settings([config(0.1, 500.0), config(0.1, 1e4)]) == {
        "max_wavelength": [500.0, 1e4]}
    assert members_model_settings([config(0.0, 500.0), config(0.2, 500.0)]) == {
        "dropout_rate": [0.0, 0.2]}
    assert members_model_settings([config(0.0, None), config(0.0, None)]) == {}
    assert set(MODEL_SETTINGS) == {"dropout_rate", "max_wavelength"}
