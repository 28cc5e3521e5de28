"""The model's member settings: a wavelength base set on a model as a traced scalar (an ensemble
member's own) gives the outputs of a model built with that base, in every scheme that has one;
so do RoPE's test-time scaling (method, factor, trained length, YaRN's betas) and the logit
scaling (none or log n)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_models import forward, random_inputs, spread_parameters, tiny_model

from pe_research.config.stacking import (
    INIT_ONLY_KEYS,
    SCHEME_SCALARS,
    STACKED_AMONG,
    STACKED_KEYS,
)
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


YARN = {"type": "yarn", "factor": 4.0, "original_max_position": 8}
# (built: the member's own pe, program: the program model's pe, settings: the member's traced)
SCALINGS = {
    "pi-in-a-plain-program": ({"scaling": {"type": "pi", "factor": 4.0}},
                              {"scaling": {"factor": 4.0}}, {"scaling_type": 1.0}),
    "ntk-in-a-plain-program": ({"scaling": {"type": "ntk", "factor": 4.0}},
                               {"scaling": {"factor": 4.0}}, {"scaling_type": 2.0}),
    "yarn-in-a-plain-program": ({"scaling": YARN}, {"scaling": {"factor": 4.0,
                                                                "original_max_position": 8}},
                                {"scaling_type": 3.0}),
    "plain-in-a-yarn-program": ({"scaling": {"factor": 4.0, "original_max_position": 8}},
                                {"scaling": YARN}, {"scaling_type": 0.0}),
    "yarn-factor-length-and-betas": (
        {"scaling": {**YARN, "factor": 2.0, "original_max_position": 16, "beta_fast": 16.0,
                     "beta_slow": 2.0}},
        {"scaling": YARN}, {"scaling_factor": 2.0, "scaling_original_max_position": 16.0,
                            "scaling_beta_fast": 16.0, "scaling_beta_slow": 2.0}),
    "log-n-in-a-plain-program": ({"logit_scaling": "log_n_scaling"}, {}, {"logit_scaling": 1.0}),
    "plain-in-a-log-n-program": ({}, {"logit_scaling": "log_n_scaling"}, {"logit_scaling": 0.0}),
}


def rope_pe(pe: dict) -> dict:
    """RoPE's default block with ``pe``'s keys (its scaling block merged into the default)."""
    base = default_pe_config("rope")
    return {**base, **pe, "scaling": {**base["scaling"], **pe.get("scaling", {})}}


@pytest.mark.parametrize(("built", "program", "settings"), SCALINGS.values(), ids=SCALINGS)
def test_a_traced_scaling_gives_the_outputs_of_a_model_built_with_it(built, program, settings):
    """Model A built with a member's scaling, model B with the program's (the same parameters):
    B with the member's scaling set as arguments of the program equals A, and B as built does
    not."""
    graph_a, state = spread_parameters(tiny_model("rope", pe=rope_pe(built)))
    graph_b, _ = spread_parameters(tiny_model("rope", pe=rope_pe(program)))
    source, target = random_inputs(batch=2, source_len=9, target_len=7)

    @jax.jit
    def both(state, settings):
        model_b = set_member_settings(nnx.merge(graph_b, state), settings)
        return (forward(nnx.merge(graph_a, state), source, target, 3, 5),
                forward(model_b, source, target, 3, 5),
                forward(nnx.merge(graph_b, state), source, target, 3, 5))

    want, got, program_own = both(state, {k: jnp.float32(v) for k, v in settings.items()})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert float(jnp.max(jnp.abs(program_own - want))) > 1e-3  # the setting reaches the outputs


# (scheme, pe of the member's model): keys that only draw the initial parameters
INIT_ONLY = {
    "learned": {"init_std": 0.5}, "path": {"init_std": 0.5}, "shaw": {"init_std": 0.5},
    "position_coupling": {"init_std": 0.5}, "t5": {"init_std": 0.5}, "fire": {"init_c": 0.5},
    "fox": {"gate_init_std": 0.5, "gate_bias_init": 1.0}, "pope": {"bias_init": "uniform"},
    "transformer_xl": {"bias_init_std": 0.5},
    "alibi": {"logit_scaling": "ssmax", "ssmax_init": 0.9},
}


def test_every_stacked_key_of_the_model_is_a_member_setting_or_draws_only_the_initialisation():
    """A key of the model that members may differ in reaches each member's model: set on it as a
    traced setting, drawn into its own parameters, or (the randomized range) its positions."""
    of_the_model = {key for key in (*STACKED_KEYS, *STACKED_AMONG) if key.startswith("model.")}
    assert of_the_model == {*MODEL_SETTINGS.values(), *INIT_ONLY_KEYS,
                            "model.pe.randomize.max_position"}


def test_every_key_of_the_initialisation_is_checked():
    checked = {f"model.pe.{key}" for pe in INIT_ONLY.values() for key in pe}
    assert checked - {"model.pe.logit_scaling"} == set(INIT_ONLY_KEYS)


@pytest.mark.parametrize("scheme", INIT_ONLY)
def test_a_key_of_the_initialisation_only_changes_the_parameters(scheme):
    """Every key of ``INIT_ONLY_KEYS``: the program's model (built with the default) running a
    member's parameters (drawn with the member's value) gives the member's own model's outputs;
    the parameters themselves differ."""
    own = INIT_ONLY[scheme]
    program_pe = {"logit_scaling": own["logit_scaling"]} if "logit_scaling" in own else {}
    graph, state = nnx.split(tiny_model(scheme, pe=own))
    program_graph, program_state = nnx.split(tiny_model(scheme, pe=program_pe))
    assert not all(np.allclose(a, b) for a, b in zip(
        jax.tree.leaves(state), jax.tree.leaves(program_state), strict=True))
    source, target = random_inputs(batch=2, source_len=9, target_len=7)
    want = forward(nnx.merge(graph, state), source, target, 3, 5)
    got = forward(nnx.merge(program_graph, state), source, target, 3, 5)
    np.testing.assert_array_equal(got, want)


# (scheme, key, the member's value, the program's): scalars of a scheme's forward
# (scheme, key, the member's value, the program model's); HoPE's 0 turns it off, both ways round
SCHEME_SCALAR_CASES = [("fire", "init_threshold", 4.0, 512.0), ("fire", "eps", 0.5, 1e-6),
                       ("xpos", "scale_base", 4.0, 512.0), ("xpos", "gamma", 0.05, 0.4),
                       ("rope", "hope_train_length", 16, 0), ("rope", "hope_train_length", 0, 16)]


def test_every_scheme_scalar_is_checked():
    assert {f"model.pe.{key}" for _, key, _, _ in SCHEME_SCALAR_CASES} == set(SCHEME_SCALARS)


@pytest.mark.parametrize(("scheme", "key", "value", "program"), SCHEME_SCALAR_CASES,
                         ids=[f"{scheme}-{key}-{value}-in-{program}"
                              for scheme, key, value, program in SCHEME_SCALAR_CASES])
def test_a_scheme_scalar_set_as_a_member_setting_gives_the_outputs_of_a_model_built_with_it(
        scheme, key, value, program):
    """FIRE's L0 and eps, xPos's decay and HoPE's training length as traced member settings
    (the decay acts in the decoder)."""
    graph_a, state = spread_parameters(tiny_model(scheme, pe={key: value}))
    graph_b, _ = spread_parameters(tiny_model(scheme, pe={key: program}))
    source, target = random_inputs(batch=2, source_len=9, target_len=7)
    settings = members_model_settings([{"model": {"pe": {key: v}}} for v in (value, program)])
    assert set(settings) == {key}

    @jax.jit
    def both(state, setting):
        model_b = set_member_settings(nnx.merge(graph_b, state), {key: setting})
        return (forward(nnx.merge(graph_a, state), source, target, 3, 5),
                forward(model_b, source, target, 3, 5),
                forward(nnx.merge(graph_b, state), source, target, 3, 5))

    want, got, program_own = both(state, jnp.float32(settings[key][0]))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert float(jnp.max(jnp.abs(program_own - want))) > 1e-3


def test_members_carry_the_settings_they_differ_in_and_only_those():
    def config(rate: float, base: float | None):
        pe = {"type": "alibi"} if base is None else {"type": "rope", "max_wavelength": base}
        return {"model": {"dropout_rate": rate, "pe": pe}}

    assert members_model_settings([config(0.1, 500.0), config(0.1, 1e4)]) == {
        "max_wavelength": [500.0, 1e4]}
    assert members_model_settings([config(0.0, 500.0), config(0.2, 500.0)]) == {
        "dropout_rate": [0.0, 0.2]}
    assert members_model_settings([config(0.0, None), config(0.0, None)]) == {}
    rope = [{"model": {"dropout_rate": 0.0, "pe": rope_pe({"scaling": {"type": name},
                                                           "logit_scaling": logit})}}
            for name, logit in (("none", "none"), ("yarn", "log_n_scaling"), ("pi", "none"))]
    assert members_model_settings(rope) == {"scaling_type": [0.0, 3.0, 1.0],
                                            "logit_scaling": [0.0, 1.0, 0.0]}
    assert set(MODEL_SETTINGS) == {
        "dropout_rate", "max_wavelength", "scaling_type", "scaling_factor",
        "scaling_original_max_position", "scaling_beta_fast", "scaling_beta_slow",
        "logit_scaling", "init_threshold", "eps", "scale_base", "gamma", "hope_train_length",
        "abacus_max_k"}
