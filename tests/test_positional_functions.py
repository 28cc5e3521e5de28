"""Golden values of the pure positional functions, checked against written-out formulas."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pe_research.core.errors import ConfigError
from pe_research.positional import alibi_slopes, apply_rope, sinusoidal, t5_relative_bucket
from pe_research.runs.restore import check_eval_overrides


def test_sinusoidal_matches_formula():
    dim, base = 8, 10_000.0
    table = np.asarray(sinusoidal(jnp.arange(5), dim, base))
    for p in range(5):
        for i in range(dim // 2):
            angle = p / base ** (2 * i / dim)
            assert table[p, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[p, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoidal_norm_is_sqrt_half_dim():
    table = sinusoidal(jnp.arange(1000), 64)
    np.testing.assert_allclose(jnp.linalg.norm(table, axis=-1), math.sqrt(32), rtol=1e-5)


def test_alibi_slopes_power_of_two():
    np.testing.assert_allclose(alibi_slopes(8), [2.0 ** -(i + 1) for i in range(8)])


def test_alibi_slopes_non_power_of_two():
    # 4 heads of the 4-head sequence, then every other slope of the 8-head sequence.
    np.testing.assert_allclose(alibi_slopes(6), [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8])
    np.testing.assert_allclose(alibi_slopes(1), [2.0 ** -8])


@pytest.mark.parametrize(
    "relative, expected",
    # key - query: 0 and 3 exact; +3 uses the "future" half (+16); 8 is the first log bucket;
    # 20 -> 8 + int(log(20/8)/log(16)*8) = 10; >=127 saturates at 15.
    [(0, 0), (-3, 3), (3, 19), (-8, 8), (-20, 10), (-127, 15), (-1000, 15), (20, 26)],
)
def test_t5_buckets_bidirectional(relative, expected):
    assert int(t5_relative_bucket(jnp.asarray(relative), bidirectional=True)) == expected


@pytest.mark.parametrize(
    "relative, expected",
    # future keys share bucket 0; 16 exact buckets; 20 -> 16 + int(log(20/16)/log(8)*16) = 17.
    [(5, 0), (-5, 5), (-16, 16), (-20, 17), (-100, 30), (-200, 31)],
)
def test_t5_buckets_unidirectional(relative, expected):
    assert int(t5_relative_bucket(jnp.asarray(relative), bidirectional=False)) == expected


@pytest.mark.parametrize(("max_distance", "last_in_bucket_8"), [(128, 11), (1024, 14)])
def test_t5_max_distance_decides_which_distances_share_the_first_log_bucket(max_distance,
                                                                            last_in_bucket_8):
    # 16 causal buckets: 0-7 exact; d joins bucket 8 while 8 * log(d / 8) / log(M / 8) < 1,
    # that is d < 8 * (M / 8) ** (1 / 8): 11.3 for M = 128, 14.7 for M = 1024.
    distances = jnp.arange(7, last_in_bucket_8 + 2)
    buckets = t5_relative_bucket(-distances, bidirectional=False, num_buckets=16,
                                 max_distance=max_distance)
    assert buckets.tolist() == [7] + [8] * (last_in_bucket_8 - 7) + [9]


def test_t5_max_distance_may_change_at_evaluation_but_num_buckets_may_not():
    check_eval_overrides(["--config.model.pe.max_distance=1024"])
    with pytest.raises(ConfigError, match="model.pe.num_buckets"):
        check_eval_overrides(["--config.model.pe.num_buckets=64"])


def test_rope_preserves_norm():
    x = jax.random.normal(jax.random.key(0), (2, 7, 3, 8))
    positions = jnp.broadcast_to(jnp.arange(7) * 13, (2, 7))
    rotated = apply_rope(x, positions)
    np.testing.assert_allclose(jnp.linalg.norm(rotated, axis=-1), jnp.linalg.norm(x, axis=-1),
                               rtol=1e-5)


def test_rope_dot_product_depends_only_on_offset():
    q_key, k_key = jax.random.split(jax.random.key(1))
    q = jax.random.normal(q_key, (1, 1, 1, 16))
    k = jax.random.normal(k_key, (1, 1, 1, 16))

    def score(q_pos, k_pos):
        rq = apply_rope(q, jnp.full((1, 1), q_pos))
        rk = apply_rope(k, jnp.full((1, 1), k_pos))
        return float(jnp.sum(rq * rk))

    reference = score(5, 2)
    for shift in (1, 17, 250):
        assert score(5 + shift, 2 + shift) == pytest.approx(reference, abs=1e-4)
    assert abs(score(5, 2) - score(2, 5)) > 1e-3  # but it does see the offset's sign


def test_rope_scale_divides_positions():
    x = jax.random.normal(jax.random.key(2), (1, 4, 1, 8))
    positions = jnp.arange(4)[None] * 2
    np.testing.assert_allclose(apply_rope(x, positions, scale=2.0),
                               apply_rope(x, positions // 2), atol=1e-6)
