"""Attention over a part of the query rows: evaluation's blocks of query rows give, for every
scheme and architecture, the logits of all rows at once, in a loop over ceil(T / rows) blocks
and a smaller memory estimate; a single-stack model's last layer computes its target slots
alone (encoder-only) and gives the logits and gradients of its every-row form, with less
work."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from test_architectures import ragged_batch, supported
from tiny_models import tiny_config, with_task_positions

from pe_research.config import base_config
from pe_research.config.validate import validate_config
from pe_research.core.errors import ConfigError
from pe_research.evaluation import memory
from pe_research.model import Seq2SeqTransformer, SingleStackTransformer, build_model
from pe_research.model.attention import MultiHeadAttention, set_query_block
from pe_research.model.decoding import greedy_decode
from pe_research.model.inputs import batch_positions
from pe_research.model.query_blocks import in_query_blocks
from pe_research.model.single_stack import packed_mask, target_slots
from pe_research.positional import SCHEMES
from pe_research.training.optimizer import make_optimizer
from pe_research.training.step import step_functions

pytestmark = pytest.mark.battery  # every scheme (or architecture): make test runs it

ARCHITECTURES = ("encoder_decoder", "encoder_only", "decoder_only")


def model_of(architecture: str, scheme: str):
    config = tiny_config(scheme, architecture=architecture)
    model_class = Seq2SeqTransformer if architecture == "encoder_decoder" else \
        SingleStackTransformer
    return model_class(config, rngs=nnx.Rngs(0))


def logits_of(model, batch):
    batch = with_task_positions(batch, model.config.pe)
    positions = batch_positions(model.config.pe, batch, jax.random.key(0), False,
                                model.config.architecture)
    return jax.jit(lambda b, p: model(b["source"], b["target_input"], *p, b["source_mask"],
                                      b["target_mask"]))(batch, positions)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_blocks_of_query_rows_give_the_logits_of_all_rows(architecture, scheme):
    """Widths 7 in blocks of 3 (the last padded), ragged rows: every scheme's bias and own
    attention are row-local, so the logits agree to float32 rounding."""
    if architecture != "encoder_decoder" and not supported(architecture, scheme):
        return
    model = model_of(architecture, scheme)
    batch = ragged_batch(source_width=7, target_width=7)
    whole = logits_of(model, batch)
    blocked = logits_of(set_query_block(model, 3), batch)
    mask = np.asarray(batch["target_mask"])
    np.testing.assert_allclose(np.asarray(blocked)[mask], np.asarray(whole)[mask], atol=2e-6,
                               rtol=1e-5)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("scheme", ["rope", "t5", "fire", "transformer_xl", "fox", "cope"])
def test_greedy_decoding_in_blocks_decodes_the_same_tokens(architecture, scheme):
    """The encoder (encoder-decoder), the prefill of source + BOS (decoder-only) and the one
    forward pass (encoder-only) attend in blocks of 3; each step's single query does not."""
    if architecture != "encoder_decoder" and not supported(architecture, scheme):
        return
    model = model_of(architecture, scheme)
    batch = ragged_batch(source_width=7, target_width=7)
    positions = batch_positions(model.config.pe, batch, jax.random.key(0), False, architecture)

    def decode(rows):
        graph, state = nnx.split(set_query_block(model, rows))
        return jax.jit(lambda state: greedy_decode(
            nnx.merge(graph, state), batch["source"], positions[0], batch["source_mask"],
            positions[1], target_mask_BxT=batch["target_mask"], eos_id=-1))(state)

    np.testing.assert_array_equal(decode(3), decode(0))


def every_row_logits(model, source, target_input, source_positions, target_positions,
                     source_mask, target_mask):
    """A single-stack model's logits with its last layer, like the others, over every row of
    the joint sequence, read at the target slots afterwards."""
    tokens, positions, real = model.joint_inputs(source, model.target_side(target_input),
                                                 source_positions, target_positions,
                                                 source_mask, target_mask)
    x = model.embed_inputs(tokens, positions, None)
    visible = packed_mask(real, model.causal)
    for layer in model.layers:
        x = layer(x, positions, visible, model.pe, None)
    return model.logits(target_slots(x, jnp.sum(source_mask, -1), target_input.shape[1]))


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_the_last_layer_computes_the_target_slots_alone(scheme):
    """Encoder-only, ragged rows of 7 + 7: the logits and every parameter's gradient (of a fixed
    random projection of the real slots' logits) equal the every-row form's to float32
    rounding, and the program no longer holds the feed-forward products of the 7 rows that are
    not slots. (Decoder-only keeps every row: tests/test_key_length_models.py.)"""
    architecture = "encoder_only"
    if not supported(architecture, scheme):
        return
    model = model_of(architecture, scheme)
    batch = with_task_positions(ragged_batch(source_width=7, target_width=7), model.config.pe)
    inputs = (batch["source"], batch["target_input"],
              *batch_positions(model.config.pe, batch, jax.random.key(0), False, architecture),
              batch["source_mask"], batch["target_mask"])
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    weights = jax.random.normal(jax.random.key(1), (2, 7, model.config.vocab_size))
    real = batch["target_mask"][..., None]

    def logits_and_grads(forward):
        def loss(params):
            logits = forward(nnx.merge(graphdef, params, rest), *inputs)
            return jnp.sum(jnp.where(real, logits * weights, 0)), logits
        program = jax.jit(jax.grad(loss, has_aux=True))
        grads, logits = program(params)
        flops = jax.jit(lambda p: loss(p)[1]).lower(params).cost_analysis()["flops"]
        return logits, grads, flops

    slots, slots_grads, slots_flops = logits_and_grads(lambda m, *a: m(*a))
    rows, rows_grads, rows_flops = logits_and_grads(every_row_logits)
    mask = np.asarray(batch["target_mask"])
    np.testing.assert_allclose(np.asarray(slots)[mask], np.asarray(rows)[mask], atol=2e-6,
                               rtol=1e-5)
    # A gradient the loss barely depends on (a softmax-invariant bias: ~1e-7) is rounding.
    scale = max(float(np.max(np.abs(leaf))) for leaf in jax.tree.leaves(rows_grads))
    for (path, got), want in zip(jax.tree_util.tree_leaves_with_path(slots_grads),
                                 jax.tree.leaves(rows_grads), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6 * scale,
                                   err_msg=jax.tree_util.keystr(path))
    feed_forward = 2 * (2 * 2 * 7 * model.config.d_model * model.config.d_ff)  # B 2, 7 rows
    assert rows_flops - slots_flops >= feed_forward


def test_a_causal_mask_is_not_cut_to_a_part_of_its_rows():
    """cuDNN reads a causal mask as its flag (query i sees keys up to i), which a part of the
    rows would break; a bidirectional one keeps its key lengths for any rows."""
    real = jnp.arange(5)[None, :] < jnp.asarray([[5], [3]])
    rows = jnp.asarray([[3, 4], [2, 4]])  # row 1's 4: a padding query, which sees itself
    with pytest.raises(ValueError, match="causal"):
        packed_mask(real, True, rows)
    mask = packed_mask(real, False, rows)
    np.testing.assert_array_equal(mask.key_lengths, [5, 3])
    np.testing.assert_array_equal(mask.dense, jnp.take_along_axis(
        packed_mask(real, False).dense, rows[:, :, None], axis=1))


def test_the_training_loops_eval_step_attends_in_blocks_and_its_train_step_does_not():
    """``step_functions``' eval step with ``query_block`` 3 gives the sums of whole rows (and
    traces a loop over blocks); its train step traces no such loop."""
    model = model_of("encoder_decoder", "t5")
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    batch = ragged_batch(source_width=7, target_width=7)
    key = jax.random.key(0)
    sums = {}
    optimizer = make_optimizer(base_config().train)
    for rows in (0, 3):
        train_step, eval_step = step_functions(graphdef, rest, base_config().train, optimizer,
                                               rows)
        sums[rows] = jax.jit(eval_step)(params, batch, key)
        loops = str(jax.make_jaxpr(eval_step)(params, batch, key)).count("scan[")
        assert (loops > 0) == (rows > 0)
    for name, value in sums[0].items():
        np.testing.assert_allclose(sums[3][name], value, rtol=1e-5, err_msg=name)
    optimizer_state = optimizer.init(params)
    train_jaxpr = jax.make_jaxpr(lambda p, o: train_step(p, o, batch, 0, key))(
        params, optimizer_state)
    assert "scan[" not in str(train_jaxpr)


def test_rows_are_cut_into_padded_blocks_and_put_back_in_order():
    """A row-wise function of (query, position, mask row), evaluated in ceil(7 / 3) = 3 steps
    of a loop, equals its value on all rows; padded rows never reach the output."""
    q = jax.random.normal(jax.random.key(0), (2, 7, 2, 4))
    positions = jnp.broadcast_to(jnp.arange(7) * 10, (1, 7))  # shared by the rows: [1, T]
    mask = jnp.arange(5)[None, None, :] <= jnp.arange(7)[None, :, None] % 5
    mask = jnp.broadcast_to(mask, (2, 7, 5))

    def row_wise(q, positions, mask):
        return q * 2 + positions[..., None, None] + jnp.sum(mask, -1)[..., None, None]

    blocked = in_query_blocks(row_wise, 3, q, positions, mask)
    np.testing.assert_array_equal(blocked, row_wise(q, positions, mask))
    jaxpr = jax.make_jaxpr(lambda q: in_query_blocks(row_wise, 3, q, positions, mask))(q)
    loops = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]
    assert len(loops) == 1 and loops[0].params["length"] == 3


def test_blocks_cut_the_memory_estimate_of_a_long_forward_pass():
    """Width 256 in blocks of 64: the attention's values are [B, H, 64, S], not [B, H, T, S],
    so the estimate (memory.estimate_bytes, no compile) falls more than 3x (4x for those values;
    the rest of the model is small here)."""
    model = model_of("encoder_decoder", "alibi")
    batch = ragged_batch(source_width=256, target_width=256)

    def estimate(rows):
        set_query_block(model, rows)
        positions = batch_positions(model.config.pe, batch, jax.random.key(0), False,
                                    "encoder_decoder")
        return memory.estimate_bytes(lambda b: model(
            b["source"], b["target_input"], *positions, b["source_mask"], b["target_mask"]),
            batch)

    whole, blocked = estimate(0), estimate(64)
    assert 3 < whole / blocked <= 4


def test_training_attends_all_rows_at_once_and_a_negative_block_is_refused():
    model = build_model(base_config(), 20)
    blocks = [module.query_block for _, module in nnx.iter_graph(model)
              if isinstance(module, MultiHeadAttention)]
    assert blocks and set(blocks) == {0}
    config = base_config()
    config.eval.query_block = -1
    with pytest.raises(ConfigError, match="eval.query_block"):
        validate_config(config)
