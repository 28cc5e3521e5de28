"""Row lookups on flat indices: the same values and gradients as jnp.take_along_axis and a
one-hot sum, with broadcast indices, vector entries and out-of-range indices."""

import jax
import jax.numpy as jnp
import numpy as np

from pe_research.positional.row_lookup import sum_into_rows, take_from_rows


def _inputs(seed: int = 0):
    k_table, k_index = jax.random.split(jax.random.key(seed))
    table = jax.random.normal(k_table, (2, 3, 5))          # [*lead, P]
    index = jax.random.randint(k_index, (1, 3, 7), 0, 5)   # [*lead, S], batch 1 -> broadcast
    return table, index


def test_take_from_rows_equals_take_along_axis_with_its_gradient():
    table, index = _inputs()
    full = jnp.broadcast_to(index, (2, 3, 7))
    np.testing.assert_array_equal(take_from_rows(table, index),
                                  jnp.take_along_axis(table, full, axis=-1))
    weights = jax.random.normal(jax.random.key(1), (2, 3, 7))
    ours = jax.grad(lambda t: jnp.sum(weights * take_from_rows(t, index)))(table)
    theirs = jax.grad(lambda t: jnp.sum(weights * jnp.take_along_axis(t, full, axis=-1)))(table)
    np.testing.assert_allclose(ours, theirs, atol=1e-6)
    assert float(jnp.max(jnp.abs(ours))) > 0


def test_take_from_rows_fetches_vector_entries_and_clips_bad_indices():
    table = jnp.arange(2 * 4 * 2, dtype=jnp.float32).reshape(2, 4, 2)  # [rows, P, 2]
    index = jnp.asarray([[3, 0, 9], [1, -4, 2]])
    np.testing.assert_array_equal(take_from_rows(table, index),
                                  [[[6, 7], [0, 1], [6, 7]], [[10, 11], [8, 9], [12, 13]]])


def test_sum_into_rows_equals_a_one_hot_sum_with_its_gradient():
    table, index = _inputs(2)
    values = jax.random.normal(jax.random.key(3), (2, 3, 7))
    one_hot = jax.nn.one_hot(jnp.broadcast_to(index, (2, 3, 7)), 5)   # [2, 3, 7, 5]
    np.testing.assert_allclose(sum_into_rows(values, index, 5),
                               jnp.einsum("abs,absp->abp", values, one_hot), atol=1e-6)
    upstream = jax.random.normal(jax.random.key(4), (2, 3, 5))
    ours = jax.grad(lambda x: jnp.sum(upstream * sum_into_rows(x, index, 5)))(values)
    np.testing.assert_allclose(ours, jnp.einsum("abp,absp->abs", upstream, one_hot), atol=1e-6)


def test_sum_into_rows_drops_out_of_range_indices():
    values = jnp.asarray([[1.0, 2.0, 4.0, 8.0]])
    index = jnp.asarray([[0, -1, 3, 1]])   # -1 and 3 lie outside a width of 3
    np.testing.assert_array_equal(sum_into_rows(values, index, 3), [[1.0, 8.0, 0.0]])
