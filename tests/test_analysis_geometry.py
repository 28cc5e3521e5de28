"""Geometry numbers against hand-computed values: norms, token/position cosines, PCA, LN folding."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_models import arange_positions, tiny_model

from pe_research.analysis.geometry import norm_profile
from pe_research.analysis.orthogonality import random_mean_abs_cosine, token_position_orthogonality
from pe_research.analysis.shape import principal_components
from pe_research.analysis.streams import Split, split_layer_norm
from pe_research.analysis.vectors import (
    first_layer_norms,
    fold_layer_norm_scale,
    input_parts,
    position_table,
)


def test_norm_profile_statistics_are_over_positions_past_the_offset():
    vectors = np.zeros((6, 2))
    vectors[:, 0] = [10.0, 10.0, 1.0, 3.0, 1.0, 3.0]  # norms; the first two are skipped
    profile = norm_profile(vectors, offset=2)
    assert profile["mean"] == pytest.approx(2.0)
    assert profile["std"] == pytest.approx(1.0)  # population std of 1, 3, 1, 3
    assert profile["cv"] == pytest.approx(0.5)
    assert profile["norms"] == [10.0, 10.0, 1.0, 3.0, 1.0, 3.0]
    with pytest.raises(ValueError, match="offset 6"):
        norm_profile(vectors, offset=6)


def test_orthogonality_of_hand_made_vectors():
    tokens = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    positions = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 2.0], [0.0, -3.0, 0.0]])
    result = token_position_orthogonality(tokens, positions, num_bins=4)
    assert result["max_abs_cos"] == pytest.approx(1.0)
    assert result["argmax"] == {"token_id": 1, "position": 2, "cos": pytest.approx(-1.0)}
    assert result["mean_abs_cos"] == pytest.approx((2 / math.sqrt(2) + 1.0) / 6)
    assert sum(result["histogram"]["counts"]) == 6
    assert result["histogram"]["counts"] == [1, 0, 3, 2]  # cos -1; none; three 0; two 0.71


def test_random_baseline_matches_closed_forms_and_sampling():
    assert random_mean_abs_cosine(2) == pytest.approx(2 / math.pi)  # E|cos U|, U uniform
    assert random_mean_abs_cosine(3) == pytest.approx(0.5)  # cos uniform on [-1, 1]
    rng = np.random.default_rng(0)
    sample = token_position_orthogonality(rng.normal(size=(200, 64)), rng.normal(size=(300, 64)))
    assert sample["mean_abs_cos"] == pytest.approx(random_mean_abs_cosine(64), rel=0.02)


def test_pca_of_a_circle_in_a_plane():
    angles = np.linspace(0, 2 * np.pi, 64, endpoint=False)
    basis = np.linalg.qr(np.random.default_rng(0).normal(size=(6, 6)))[0][:2]  # a random plane
    vectors = 3.0 + np.stack([np.cos(angles), np.sin(angles)], -1) @ basis
    pca = principal_components(vectors)
    np.testing.assert_allclose(pca["explained_variance_ratio"], [0.5, 0.5, 0.0], atol=1e-9)
    radii = np.linalg.norm(pca["coordinates"][:, :2], axis=-1)
    np.testing.assert_allclose(radii, 1.0, atol=1e-9)


@pytest.mark.parametrize("combine", ["add", "concat"])
def test_folded_norm_is_the_position_share_of_the_first_layer_norm(combine):
    """LN(token + position) = content part + fold(position) / sigma(token + position)."""
    model = tiny_model("learned", pe={"combine": combine, "init_std": 0.5})
    norm = first_layer_norms(model)["encoder"]
    tokens = jnp.asarray([[3, 4, 5, 6, 7]])
    positions = arange_positions(1, 5)
    token, position = input_parts(model, tokens, positions)
    split = split_layer_norm(norm, Split(token, position))
    x = token + position
    sigma = jnp.sqrt(jnp.var(x, axis=-1, keepdims=True) + norm.epsilon)
    folded = fold_layer_norm_scale(position_table(model, 5), norm)
    np.testing.assert_allclose(split.position, folded[None] / sigma, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(split.total, norm(x), atol=1e-5)


def test_post_ln_models_have_no_first_layer_norm_to_fold():
    assert first_layer_norms(tiny_model("sinusoidal", norm="post")) == {}
    assert set(first_layer_norms(tiny_model("sinusoidal"))) == {"encoder", "decoder"}


def test_position_table_is_none_without_position_vectors():
    assert position_table(tiny_model("rope"), 8) is None
    table = position_table(tiny_model("learned"), 8)
    np.testing.assert_array_equal(table, tiny_model("learned").pe.table[...][:8])
    assert jax.tree.leaves(table)[0].shape == (8, 16)
