"""Randomized positions (Ruoss et al. 2023): sorted, distinct, in range, keyed, checked configs."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx
from tiny_models import tiny_config

from pe_research.core.errors import ConfigError
from pe_research.positional import (
    DECODER_SELF,
    SCHEMES,
    build_scheme,
    check_pe_config,
    check_randomize,
    default_pe_config,
    example_keys,
    make_positions,
    random_positions,
    split_key,
)

# Every scheme whose output depends on the position arrays.
CONSUMERS = ("sinusoidal", "learned", "rope", "alibi", "t5", "shaw", "transformer_xl",
             "kerple_log", "kerple_power", "fire", "xpos")


def pe_block(max_position: int, eval_policy: str = "randomized", scheme: str = "rope") -> dict:
    return {**default_pe_config(scheme),
            "randomize": {"max_position": max_position, "eval_policy": eval_policy}}


def prefix_mask(lengths, width: int) -> jax.Array:
    return jnp.arange(width)[None, :] < jnp.asarray(lengths)[:, None]


def test_off_by_default_and_plain_policy_give_arange_shared_by_the_rows():
    mask = prefix_mask([3, 5], 5)
    arange = np.arange(5)[None, :]  # [1, T]: one row for the batch, so the bias is batch-1
    assert default_pe_config("alibi")["randomize"] == {"max_position": 0,
                                                       "eval_policy": "randomized",
                                                       "per": "example",
                                                       "eval_per": "example"}
    for pe, training in [(default_pe_config("rope"), True), (pe_block(64, "plain"), False)]:
        positions = make_positions(pe, mask, jax.random.key(0), training)
        assert positions.dtype == jnp.int32 and positions.shape == (1, 5)
        np.testing.assert_array_equal(positions, arange)


@pytest.mark.parametrize("training, policy", [(True, "plain"), (True, "randomized"),
                                              (False, "randomized")])
def test_randomized_rows_are_sorted_distinct_and_in_range(training, policy):
    lengths = [1, 4, 7, 7, 0]
    positions = np.asarray(make_positions(pe_block(20, policy), prefix_mask(lengths, 7),
                                          jax.random.key(1), training))
    assert positions.shape == (5, 7) and positions.dtype == np.int32
    assert positions.min() >= 0 and positions.max() < 20
    for row, n in zip(positions, lengths, strict=True):
        assert np.all(np.diff(row[:n]) > 0)  # sorted and distinct over the real tokens
        assert len(set(row.tolist())) == 7  # padded slots hold further distinct positions
    assert not np.array_equal(positions[2], np.arange(7))


def test_deterministic_for_a_key_and_different_across_keys_and_steps():
    pe, mask = pe_block(256), prefix_mask([8, 8], 8)
    base = jax.random.key(7)
    first = make_positions(pe, mask, base, training=True)
    np.testing.assert_array_equal(make_positions(pe, mask, base, training=True), first)
    steps = [np.asarray(make_positions(pe, mask, jax.random.fold_in(base, step), True))
             for step in range(4)]
    assert len({row.tobytes() for rows in steps for row in rows}) == 8  # rows and steps differ
    assert not np.array_equal(first[0], first[1])  # each example draws its own subset


def test_padding_does_not_move_the_positions_of_real_tokens():
    key = jax.random.key(3)
    short = random_positions(key, prefix_mask([5, 2], 5), 40)
    bucketed = random_positions(key, prefix_mask([5, 2], 16), 40)
    np.testing.assert_array_equal(bucketed[0, :5], short[0, :5])
    np.testing.assert_array_equal(bucketed[1, :2], short[1, :2])


def test_each_position_is_equally_likely():
    positions = np.asarray(random_positions(jax.random.key(0), prefix_mask([3] * 4000, 3), 16))
    frequency = np.bincount(positions.ravel(), minlength=16) / 4000
    np.testing.assert_allclose(frequency, 3 / 16, atol=0.03)  # a uniform 3-subset of 16


def test_buckets_longer_than_max_position_keep_real_tokens_valid():
    positions = np.asarray(random_positions(jax.random.key(2), prefix_mask([4, 8], 10), 8))
    assert positions.max() < 8 and positions.min() >= 0
    assert np.all(np.diff(positions[0, :4]) > 0)
    np.testing.assert_array_equal(positions[1, :8], np.arange(8))  # all 8 positions, sorted


def test_randomized_policy_needs_a_key():
    with pytest.raises(ValueError, match="RNG key"):
        make_positions(pe_block(32), prefix_mask([2], 2), None, training=False)


@pytest.mark.parametrize("scheme", CONSUMERS)
def test_every_position_consuming_scheme_sees_randomized_positions(scheme):
    pe = {**default_pe_config(scheme), "randomize": {"max_position": 64}}
    if scheme == "learned":
        pe["max_len"] = 64  # the table must cover every sampled position
    check_pe_config(pe, d_model=16, num_heads=2)
    module = build_scheme(pe, d_model=16, num_heads=2, rngs=nnx.Rngs(0))
    mask = jnp.ones((2, 6), bool)
    randomized = make_positions(pe, mask, jax.random.key(0), training=True)
    plain = jnp.broadcast_to(jnp.arange(6, dtype=jnp.int32), (2, 6))
    q = jax.random.normal(jax.random.key(1), (2, 6, 2, 8))

    def hooks(positions):
        kind = DECODER_SELF if DECODER_SELF in module.acts_in else None
        outputs = [module.input_vectors(positions)]
        if kind is not None:
            outputs += [*module.transform_qk(q, q, positions, positions, kind),
                        module.logit_bias(q, q, positions, positions, kind)]
        return [np.asarray(x) for x in outputs if x is not None]

    changed = [not np.allclose(a, b, atol=1e-5)
               for a, b in zip(hooks(randomized), hooks(plain), strict=True)]
    assert all(np.all(np.isfinite(x)) for x in hooks(randomized)) and any(changed)


def test_every_scheme_accepts_the_randomize_block():
    for name in SCHEMES:
        block = {"max_position": 0, "eval_policy": "plain"}
        assert tiny_config(name, pe={"randomize": block}).pe["randomize"] == block, name


def test_a_config_dict_block_with_a_dotted_override_works():
    config = ml_collections.ConfigDict({"pe": default_pe_config("t5")})
    config.pe.randomize.max_position = 32  # as --config.model.pe.randomize.max_position=32
    check_pe_config(config.pe, d_model=16, num_heads=2)
    positions = make_positions(config.pe, jnp.ones((1, 4), bool), jax.random.key(0), True)
    assert int(positions.max()) < 32 and not np.array_equal(positions[0], np.arange(4))


@pytest.mark.parametrize("randomize, pattern", [
    ({"max_position": -1}, r"model.pe.randomize.max_position=-1 .*integer >= 0"),
    ({"max_position": 1.5}, r"model.pe.randomize.max_position=1.5 .*integer >= 0"),
    ({"eval_policy": "test"}, r"model.pe.randomize.eval_policy='test' .*'randomized', 'plain'"),
    ({"eval_per": "row"}, r"model.pe.randomize.eval_per='row' .*'example', 'batch'"),
    ({"max_positions": 8}, r"model.pe.randomize.max_positions=8 .*valid keys are"),
    (64, r"model.pe.randomize=64 .*a mapping"),
])
def test_bad_randomize_blocks_name_key_and_valid_range(randomize, pattern):
    with pytest.raises(ConfigError, match=pattern) as error:
        tiny_config("rope", pe={"randomize": randomize})
    assert "\n" not in str(error.value)


def test_learned_table_must_cover_max_position():
    with pytest.raises(ConfigError, match=r"model.pe.max_len=16 .*max_len >= 32"):
        tiny_config("learned", pe={"max_len": 16, "randomize": {"max_position": 32}})
    tiny_config("learned", pe={"max_len": 32, "randomize": {"max_position": 32}})


def test_max_position_must_cover_the_longest_sequence():
    with pytest.raises(ConfigError, match=r"model.pe.randomize.max_position=64 .*>= the longest "
                                          r"sequence used \(100 tokens\)") as error:
        check_randomize(pe_block(64), max_length=100)
    assert "\n" not in str(error.value)
    check_randomize(pe_block(100), max_length=100)
    check_randomize(pe_block(0), max_length=10_000)  # off: nothing to cover


def test_evaluation_draws_per_example_by_default_whatever_training_did():
    mask = prefix_mask([6, 6, 6], 6)
    pe = {**pe_block(64), "randomize": {"max_position": 64, "per": "batch"}}
    assert make_positions(pe, mask, jax.random.key(0), training=True).shape == (1, 6)
    assert make_positions(pe, mask, jax.random.key(0), training=False).shape == (3, 6)
    pe["randomize"]["eval_per"] = "batch"
    assert make_positions(pe, mask, jax.random.key(0), training=False).shape == (1, 6)


def test_an_examples_draw_depends_on_its_index_not_its_batch():
    key, mask = jax.random.key(5), prefix_mask([4, 6, 2, 6, 5], 6)
    whole = random_positions(example_keys(key, 0, 5), mask, 32)
    tail = random_positions(example_keys(key, 3, 2), mask[3:], 32)
    np.testing.assert_array_equal(tail, whole[3:])
    assert not np.array_equal(whole[1], whole[3])  # same length, own draws
    first, second = split_key(example_keys(key, 0, 5))
    assert first.shape == second.shape == (5,)
    assert not np.array_equal(random_positions(first, mask, 32), random_positions(second, mask, 32))
    with pytest.raises(ValueError, match="2 keys for 5 rows"):
        random_positions(example_keys(key, 0, 2), mask, 32)


@pytest.mark.parametrize("architecture, per", [("encoder_decoder", "example"),
                                               ("decoder_only", "batch")])
def test_a_member_of_a_program_of_several_ranges_gets_its_own_ranges_positions(architecture, per):
    """A member of range r in a program whose model draws [0, 128) gets, from the same key, the
    positions a model of range r draws (0: plain ones)."""
    from pe_research.model.inputs import batch_positions, member_positions, with_range

    batch = {"source_mask": prefix_mask([5, 3, 6], 6), "target_mask": prefix_mask([4, 2, 7], 7)}
    program = {**pe_block(128), "randomize": {"max_position": 128, "per": per}}
    ranges, key = (0, 24, 128), jax.random.key(3)
    draws = {}
    for own in ranges:
        member = jax.jit(lambda r: member_positions(program, batch, key, True, architecture,
                                                    ranges, r))(jnp.int32(own))
        alone = batch_positions(with_range(program, own), batch, key, True, architecture)
        for got, want in zip(member, alone, strict=True):
            np.testing.assert_array_equal(got, np.broadcast_to(want, got.shape))
        draws[own] = np.concatenate([np.broadcast_to(p, (3, p.shape[1])) for p in member], 1)
    assert draws[24].max() < 24 <= draws[128].max()  # the draws differ: the test can fail
    assert np.array_equal(draws[0][:, :6], np.broadcast_to(np.arange(6), (3, 6)))
