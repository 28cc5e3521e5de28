"""The packed joint sequence cut to the batch's joint width: a single-stack model gives, for
every scheme, the logits and gradients it gives over all S + T columns, with less work; the
data pipeline's joint width holds every row's tokens, is one per source bucket, and is the
narrower of the rounded longest row and S + T; a learned table needs rows for it alone."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DEFAULT_CONFIG
from flax import nnx
from test_architectures import ragged_batch, supported
from tiny_models import tiny_config, with_task_positions

from pe_research import data
from pe_research.config import load_config
from pe_research.core.errors import ConfigError
from pe_research.model import SingleStackTransformer
from pe_research.model.inputs import batch_positions
from pe_research.model.single_stack import pack
from pe_research.positional import SCHEMES
from pe_research.tasks import get_task


def cut_batch(batch, width):
    """``batch`` with the joint mask of its packed rows, cut to ``width`` columns."""
    real = pack(batch["source_mask"], batch["target_mask"], jnp.sum(batch["source_mask"], -1),
                False)
    assert not np.any(np.asarray(real)[:, width:]), "only padding may be cut"
    return {**batch, "joint_mask": real[:, :width]}


@pytest.mark.battery  # every scheme: make test runs it
@pytest.mark.parametrize("architecture", ["encoder_only", "decoder_only"])
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_the_joint_sequence_cut_to_its_longest_row_gives_the_same_logits_and_gradients(
        architecture, scheme):
    """Ragged rows of 6 + 5 and 3 + 3 joint tokens over 7 + 7 columns, cut to 11: the real
    slots' logits and every parameter's gradient (of a fixed random projection of them) equal
    the uncut model's to float32 rounding, and the program does fewer FLOPs."""
    if not supported(architecture, scheme):
        return
    model = SingleStackTransformer(tiny_config(scheme, architecture=architecture),
                                   rngs=nnx.Rngs(0))
    batch = with_task_positions(ragged_batch(source_width=7, target_width=7), model.config.pe)
    positions = batch_positions(model.config.pe, batch, jax.random.key(0), False, architecture)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    weights = jax.random.normal(jax.random.key(1), (2, 7, model.config.vocab_size))
    real = batch["target_mask"][..., None]

    def logits_and_grads(joint):
        def loss(params):
            logits = nnx.merge(graphdef, params, rest)(
                batch["source"], batch["target_input"], *positions, batch["source_mask"],
                batch["target_mask"], joint_mask_BxW=joint)
            return jnp.sum(jnp.where(real, logits * weights, 0)), logits
        grads, logits = jax.jit(jax.grad(loss, has_aux=True))(params)
        flops = jax.jit(lambda p: loss(p)[1]).lower(params).cost_analysis()["flops"]
        return logits, grads, flops

    cut, cut_grads, cut_flops = logits_and_grads(cut_batch(batch, 11)["joint_mask"])
    whole, whole_grads, whole_flops = logits_and_grads(None)
    mask = np.asarray(batch["target_mask"])
    np.testing.assert_allclose(np.asarray(cut)[mask], np.asarray(whole)[mask], atol=2e-6,
                               rtol=1e-5)
    assert np.all(np.isfinite(np.asarray(cut)))  # padding slots past the cut read its last row
    scale = max(float(np.max(np.abs(leaf))) for leaf in jax.tree.leaves(whole_grads))
    for (path, got), want in zip(jax.tree_util.tree_leaves_with_path(cut_grads),
                                 jax.tree.leaves(whole_grads), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6 * scale,
                                   err_msg=jax.tree_util.keystr(path))
    # every layer but the encoder-only's last computes 3 fewer rows of its feed-forward
    layers = model.config.num_layers - (architecture == "encoder_only")
    assert whole_flops - cut_flops >= layers * 2 * (2 * 2 * 3 * model.config.d_model
                                                    * model.config.d_ff)


def test_a_training_batchs_joint_mask_is_its_packed_masks_cut_to_one_width_per_source_bucket():
    """Even pairs (n + 1 + EOS joint tokens) and duplicate_string (n + 2n + EOS) over lengths
    1-40, buckets (16, 32, 64, 128): the target and joint widths are the source bucket's
    longest training target and row to a multiple of 8 (the joint at most S + T), one per
    source bucket, and each batch's joint mask is its packed source and target masks, cut
    there."""
    cfg = {"batch_size": 8, "train_lengths": (1, 40), "length_sampling": "per_batch",
           "buckets": (16, 32, 64, 128)}
    golden = {"even_pairs": {(16, 8, 24), (32, 8, 40), (64, 8, 48)},
              "duplicate_string": {(16, 40, 56), (32, 72, 104), (64, 88, 128)}}
    for name, shapes in golden.items():
        task = get_task({"name": name}, cfg)
        assert data.train_shapes(task, cfg) == shapes
        by_source = {source: shape for source, *_ in shapes for shape in shapes
                     if shape[0] == source}
        for step in range(12):
            batch = data.train_batch(task, cfg, 0, step)
            widths = (batch["source"].shape[1], batch["target_input"].shape[1],
                      batch["joint_mask"].shape[1])
            assert widths == by_source[widths[0]] == data.train_widths(task, cfg, 0, step)
            packed = pack(jnp.asarray(batch["source_mask"]), jnp.asarray(batch["target_mask"]),
                          jnp.sum(batch["source_mask"], -1), False)
            np.testing.assert_array_equal(batch["joint_mask"], packed[:, :widths[2]])
            assert not np.any(np.asarray(packed)[:, widths[2]:])


@pytest.mark.parametrize(("max_len", "refused"), [(48, False), (47, True)])
def test_a_learned_table_needs_rows_for_the_joint_width_not_both_buckets(max_len, refused):
    """Encoder-only even_pairs up to length 40, buckets (16, 32, 64): its rows are 64 + 16 = 80
    columns, cut to 48 (42 tokens to a multiple of 8), so 48 learned rows suffice."""
    overrides = {"model.architecture": "encoder_only", "task.name": "even_pairs",
                 "data.train_lengths": "1,40", "data.buckets": "16,32,64",
                 "train.eval_lengths": "40", "eval.lengths": "40", "model.pe.type": "learned",
                 "model.pe.max_len": max_len}
    arguments = [f"--config.{key}={value}" for key, value in overrides.items()]
    if not refused:
        assert load_config(DEFAULT_CONFIG, arguments).model.pe.max_len == 48
        return
    with pytest.raises(ConfigError, match=r"model\.pe\.max_len=47 .*set model\.pe\.max_len >= 48"):
        load_config(DEFAULT_CONFIG, arguments)
