"""Encoder-only and decoder-only models: causality, padding, cached decoding, what the loss sees."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_models import VOCAB, tiny_config

from pe_research.core.errors import ConfigError
from pe_research.evaluation.batch_statistics import example_statistics
from pe_research.model import SingleStackTransformer
from pe_research.model.decoding import greedy_decode, naive_greedy_decode
from pe_research.model.inputs import batch_positions
from pe_research.model.metrics import Outputs, example_sums, range_metrics, token_cross_entropy
from pe_research.model.single_stack import pack, self_visible, target_slots
from pe_research.positional import SCHEMES
from pe_research.positional.randomize import make_positions, random_positions
from pe_research.tasks.vocabulary import BOS_ID, EOS_ID

pytestmark = pytest.mark.battery  # every scheme (or architecture): make test runs it

ARCHITECTURES = ("encoder_only", "decoder_only")
SCHEMES_TO_CHECK = ("none", "sinusoidal", "learned", "rope", "alibi", "t5", "fire", "cope")


def single_stack(architecture: str, scheme: str = "rope", seed: int = 0, **overrides):
    config = tiny_config(scheme, architecture=architecture, **overrides)
    return SingleStackTransformer(config, rngs=nnx.Rngs(seed))


def supported(architecture: str, scheme: str) -> bool:
    try:
        tiny_config(scheme, architecture=architecture)
    except ConfigError as error:
        assert "acts only in" in str(error) and architecture in str(error)
        return False
    return True


def ragged_batch(seed: int = 0, source_width: int = 6, target_width: int = 6):
    """Two examples: 6 and 3 source tokens, 4 and 2 target tokens (+ EOS), padded."""
    rng = np.random.default_rng(seed)
    source_lengths, target_lengths = np.array([6, 3]), np.array([4, 2])
    source = rng.integers(3, VOCAB, (2, source_width))
    target = rng.integers(3, VOCAB, (2, target_width))
    source_mask = np.arange(source_width) < source_lengths[:, None]
    target_mask = np.arange(target_width) < target_lengths[:, None] + 1
    target_output = np.where(np.arange(target_width) == target_lengths[:, None], EOS_ID, target)
    target_input = np.concatenate([np.full((2, 1), BOS_ID), target_output[:, :-1]], 1)
    batch = {"source": np.where(source_mask, source, 0), "source_mask": source_mask,
             "target_input": np.where(target_mask, target_input, 0),
             "target_output": np.where(target_mask, target_output, 0),
             "target_mask": target_mask}
    return {key: jnp.asarray(value) for key, value in batch.items()}


def logits_of(model, batch, key=None):
    pe = model.config.pe
    positions = batch_positions(pe, batch, jax.random.key(0), False, model.config.architecture)
    return model(batch["source"], batch["target_input"], *positions, batch["source_mask"],
                 batch["target_mask"], dropout_key=key)


def test_pack_puts_each_rows_target_side_right_after_its_source():
    source, second = jnp.asarray([[1, 2, 3, 0], [4, 0, 0, 0]]), jnp.asarray([[5, 6], [7, 8]])
    np.testing.assert_array_equal(pack(source, second, jnp.asarray([3, 1]), 9),
                                  [[1, 2, 3, 5, 6, 9], [4, 7, 8, 9, 9, 9]])


def test_joint_positions_run_on_from_the_source():
    batch = ragged_batch()
    source, target = batch_positions({"type": "rope"}, batch, jax.random.key(0), False,
                                     "decoder_only")
    # One row for the batch: the packed joint sequence's 0 .. 11, split at the source's 6.
    assert source.shape == (1, 6) and target.shape == (1, 6)
    np.testing.assert_array_equal(np.concatenate([source[0], target[0]]), np.arange(12))
    # Randomized: one sorted draw over source + target, so the target continues the source.
    pe = {"type": "rope", "randomize": {"max_position": 64, "eval_policy": "randomized"}}
    source, target = batch_positions(pe, batch, jax.random.key(1), True, "encoder_only")
    row = np.concatenate([np.asarray(source[1]), np.asarray(target[1])])[:3 + 3]
    assert source.shape == (2, 6) and list(row) == sorted(set(row.tolist())) and row.max() < 64
    drawn = {**pe, "randomize": {**pe["randomize"], "per": "batch"}}
    assert batch_positions(drawn, batch, jax.random.key(1), True, "encoder_only")[0].shape == \
        (1, 6)


@pytest.mark.parametrize("scheme", SCHEMES_TO_CHECK)
def test_decoder_only_is_causal(scheme):
    """Changing target-side token j changes no logit before slot j, and some logit at j."""
    model = single_stack("decoder_only", scheme)
    batch = ragged_batch()
    reference = logits_of(model, batch)
    for j in (1, 3):
        changed = dict(batch)
        changed["target_input"] = batch["target_input"].at[0, j].set(
            3 + (int(batch["target_input"][0, j]) - 2) % (VOCAB - 3))
        logits = logits_of(model, changed)
        np.testing.assert_array_equal(logits[0, :j], reference[0, :j])
        assert float(jnp.max(jnp.abs(logits[0, j:5] - reference[0, j:5]))) > 0


@pytest.mark.parametrize("scheme", SCHEMES_TO_CHECK)
def test_encoder_only_slots_cannot_read_the_answer(scheme):
    if not supported("encoder_only", scheme):
        return
    model = single_stack("encoder_only", scheme)
    batch = ragged_batch()
    other = dict(batch, target_input=jnp.roll(batch["target_input"], 1, axis=1) % 7 + 3,
                 target_output=jnp.zeros_like(batch["target_output"]))
    np.testing.assert_array_equal(logits_of(model, batch), logits_of(model, other))
    # ... but they do read the source, bidirectionally: the last source token moves slot 0.
    changed = dict(batch, source=batch["source"].at[0, 5].set(3 + int(batch["source"][0, 5]) % 9))
    assert float(jnp.max(jnp.abs(logits_of(model, changed)[0, 0]
                                 - logits_of(model, batch)[0, 0]))) > 0


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("scheme", SCHEMES_TO_CHECK)
def test_padding_does_not_change_real_outputs(architecture, scheme):
    if not supported(architecture, scheme):
        return
    model = single_stack(architecture, scheme)
    narrow, wide = ragged_batch(source_width=6, target_width=6), ragged_batch(
        source_width=10, target_width=9)
    wide = {key: (value.at[:, :6].set(narrow[key]) if value.ndim == 2 else value)
            for key, value in wide.items()}
    wide = {key: value.at[:, 6:].set(jnp.zeros((), value.dtype)) if value.ndim == 2 else value
            for key, value in wide.items()}
    reference, logits = logits_of(model, narrow), logits_of(model, wide)
    mask = np.asarray(narrow["target_mask"])
    np.testing.assert_allclose(np.asarray(logits)[:, :6][mask], np.asarray(reference)[mask],
                               atol=1e-5)


@pytest.mark.parametrize("scheme", SCHEMES_TO_CHECK)
def test_cached_decoding_equals_naive_decoding(scheme):
    model = single_stack("decoder_only", scheme, seed=1)
    batch = ragged_batch()
    positions = batch_positions(model.config.pe, batch, jax.random.key(0), False, "decoder_only")
    graph, state = nnx.split(model)

    @jax.jit  # one program: op by op, each decoding loop compiled on its own
    def decodings(state):
        model = nnx.merge(graph, state)
        args = (model, batch["source"], positions[0], batch["source_mask"], positions[1])

        def cached_naive_and_in_segments(eos):
            # Segments of growing cache width: decoding.cache_widths does so from 256 on.
            return (greedy_decode(*args, eos_id=eos), naive_greedy_decode(*args, eos_id=eos),
                    greedy_decode(*args, eos_id=eos, widths=(2, 3, 6)))

        # Decode every step, then stop at the token the first row emits third.
        every_step = cached_naive_and_in_segments(-1)
        decoded = [every_step, cached_naive_and_in_segments(every_step[0][0, 2])]
        # Greedy tokens are the argmax of teacher forcing on themselves.
        forced = dict(batch, target_input=jnp.concatenate(
            [jnp.full((2, 1), BOS_ID), decoded[0][0][:, :-1]], 1),
            target_mask=jnp.ones((2, 6), bool))
        return decoded, jnp.argmax(logits_of(model, forced), -1)

    decoded, forced_argmax = decodings(state)
    for cached, naive, segmented in decoded:
        np.testing.assert_array_equal(cached, naive)
        np.testing.assert_array_equal(segmented, cached)
    np.testing.assert_array_equal(forced_argmax, decoded[0][0])
    assert not np.array_equal(decoded[1][0], decoded[0][0])  # the first row stopped early


def test_encoder_only_decoding_reads_every_slot_at_once():
    model = single_stack("encoder_only", "rope")
    batch = ragged_batch()
    positions = batch_positions(model.config.pe, batch, jax.random.key(0), False, "encoder_only")
    decoded = greedy_decode(model, batch["source"], positions[0], batch["source_mask"],
                            positions[1], target_mask_BxT=batch["target_mask"])
    expected = jnp.where(batch["target_mask"], jnp.argmax(logits_of(model, batch), -1), 0)
    np.testing.assert_array_equal(decoded, expected)


def test_encoder_only_oracle_length_puts_eos_in_the_end_slot_only():
    """With the oracle length the end slot holds EOS and no other slot does, even where the
    model's argmax is EOS: the other slots take their best non-EOS token."""
    model = single_stack("encoder_only", "rope")
    batch = ragged_batch()
    positions = batch_positions(model.config.pe, batch, jax.random.key(0), False, "encoder_only")
    eos_steps_B = jnp.sum(batch["target_mask"], axis=-1) - 1  # [4, 2]
    logits = logits_of(model, batch)
    for eos in (EOS_ID, int(jnp.argmax(logits[0, 0]))):  # the second: slot 0's own argmax
        decoded = greedy_decode(model, batch["source"], positions[0], batch["source_mask"],
                                positions[1], target_mask_BxT=batch["target_mask"], eos_id=eos,
                                eos_steps_B=eos_steps_B)
        best_other = jnp.argmax(logits.at[..., eos].set(-jnp.inf), -1)
        expected = jnp.where(jnp.arange(6) == eos_steps_B[:, None], eos, best_other)
        np.testing.assert_array_equal(decoded, jnp.where(batch["target_mask"], expected, 0))
        assert decoded[0, 0] != eos and decoded[0, 4] == eos and decoded[1, 2] == eos


def test_encoder_only_range_statistics_decode_from_the_scored_forward_alone():
    """Range evaluation of an encoder-only model scores its decodings (free and at the oracle
    length) from the teacher-forced logits: every statistic equals the one of the decodings
    ``greedy_decode`` makes, and the traced program holds one forward's products, not three."""
    model = single_stack("encoder_only", "rope")
    batch = ragged_batch()
    key = jax.random.key(0)  # logits_of's: the positions of both sides are the same
    got = example_statistics(model, batch, key, oracle_length=True)
    positions = batch_positions(model.config.pe, batch, key, False, "encoder_only")

    def decode(eos_steps_B=None):
        return greedy_decode(model, batch["source"], positions[0], batch["source_mask"],
                             positions[1], target_mask_BxT=batch["target_mask"],
                             eos_steps_B=eos_steps_B)

    outputs = Outputs(logits_of(model, batch), batch["target_output"], batch["target_mask"],
                      decode(), decode(jnp.sum(batch["target_mask"], axis=-1) - 1))
    expected = example_sums(outputs, range_metrics(oracle_length=True))
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)

    def products(function, *args):
        return str(jax.make_jaxpr(function)(*args)).count("dot_general")

    one_forward = products(logits_of, model, batch)
    assert products(lambda: example_statistics(model, batch, key, oracle_length=True)) == \
        one_forward > 0


def test_decoder_only_loss_ignores_the_source_outputs():
    """The loss has zero gradient w.r.t. the final states at source slots, not at target ones."""
    model = single_stack("decoder_only", "alibi")
    batch = ragged_batch()
    positions = batch_positions(model.config.pe, batch, jax.random.key(0), False, "decoder_only")
    tokens, joint_positions, real = model.joint_inputs(
        batch["source"], batch["target_input"], *positions, batch["source_mask"],
        batch["target_mask"])
    x = model.embed_inputs(tokens, joint_positions, None)
    for layer in model.layers:
        x = layer(x, joint_positions, self_visible(real, True), model.pe, None)

    count = jnp.sum(batch["source_mask"], axis=-1)  # [6, 3]: the target side starts there

    def loss_from_states(states):
        logits = model.logits(target_slots(states, count, 6))
        return token_cross_entropy(logits, batch["target_output"], batch["target_mask"])

    full = model(batch["source"], batch["target_input"], *positions, batch["source_mask"],
                 batch["target_mask"])
    np.testing.assert_allclose(model.logits(target_slots(x, count, 6)), full, atol=1e-6)
    grads = jax.grad(loss_from_states)(x)
    assert float(jnp.max(jnp.abs(grads[0, :6]))) == 0.0  # the source slots
    assert float(jnp.max(jnp.abs(grads[1, :3]))) == 0.0
    assert float(jnp.min(jnp.max(jnp.abs(grads[0, 6:9]), axis=-1))) > 0.0  # scored targets
    assert float(jnp.min(jnp.max(jnp.abs(grads[1, 3:6]), axis=-1))) > 0.0


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_a_training_step_on_positions_shared_by_the_rows_equals_rows_and_eager(architecture,
                                                                              scheme):
    """Packed rows share their joint positions: ``[1, S + T]`` reaches every layer (a batch-1
    bias), and the logits and gradients are those of the same positions repeated per row and
    those computed op by op (for the representative schemes): a training step works on every
    supported scheme."""
    if not supported(architecture, scheme):
        return
    model = single_stack(architecture, scheme)
    batch = ragged_batch()
    # A scheme that reads the task's position IDs gets them per row; the same model-level
    # contract holds for shared positions, drawn here by the plain rule.
    pe = ({**model.config.pe, "type": "none"} if SCHEMES[scheme].task_positions
          else model.config.pe)
    shared = batch_positions(pe, batch, jax.random.key(0), False, architecture)
    assert [p.shape for p in shared] == [(1, 6), (1, 6)]
    _, joint, _ = model.joint_inputs(batch["source"], batch["target_input"], *shared,
                                     batch["source_mask"], batch["target_mask"])
    assert joint.shape == (1, 12)
    graph, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(params, positions):
        logits = nnx.merge(graph, params, rest)(batch["source"], batch["target_input"],
                                                *positions, batch["source_mask"],
                                                batch["target_mask"])
        return token_cross_entropy(logits, batch["target_output"], batch["target_mask"]), logits

    grad = jax.value_and_grad(loss, has_aux=True)
    rows = [jnp.repeat(p, 2, 0) for p in shared]
    # One program for both position layouts: one compile per case, not two.
    ((shared_loss, shared_logits), shared_grads), ((rows_loss, rows_logits), rows_grads) = (
        jax.jit(lambda params: (grad(params, shared), grad(params, rows)))(params))
    mask = np.asarray(batch["target_mask"])
    np.testing.assert_allclose(np.asarray(shared_logits)[mask], np.asarray(rows_logits)[mask],
                               atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(shared_loss, rows_loss, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(shared_grads), jax.tree.leaves(rows_grads), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert np.isfinite(float(shared_loss))
    assert sum(float(jnp.sum(jnp.abs(g))) for g in jax.tree.leaves(shared_grads)) > 0
    if scheme not in SCHEMES_TO_CHECK:
        return  # each scheme's own code runs op by op in its contract (test_scheme_contract.py)
    (eager_loss, _), eager_grads = grad(params, shared)
    np.testing.assert_allclose(shared_loss, eager_loss, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(shared_grads), jax.tree.leaves(eager_grads), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_scheme_that_cannot_act_is_one_config_error():
    with pytest.raises(ConfigError, match="cope.*acts only in.*encoder_only"):
        tiny_config("cope", architecture="encoder_only")
    with pytest.raises(ConfigError, match="model.architecture"):
        tiny_config("rope", architecture="decoder-only")


def test_randomized_positions_drawn_per_batch_are_one_row_for_the_batch():
    mask = jnp.arange(8)[None, :] < jnp.asarray([[5], [5], [3]])
    pe = {"type": "rope", "randomize": {"max_position": 64, "per": "batch"}}
    per_batch = make_positions(pe, mask, jax.random.key(0), training=True)
    assert per_batch.shape == (1, 8)  # a batch-1 bias for every row
    # The longest row's draw, exactly as one row drawn alone with the same key.
    np.testing.assert_array_equal(per_batch, random_positions(jax.random.key(0), mask[:1], 64))
    row = per_batch[0].tolist()
    assert row[:5] == sorted(row[:5]) and len(set(row)) == 8  # real tokens increase; distinct
    per_example = make_positions({**pe, "randomize": {"max_position": 64}}, mask,
                                 jax.random.key(0), training=True)
    assert per_example.shape == (3, 8)
    assert not np.array_equal(per_example[0, :5], per_example[1, :5])
