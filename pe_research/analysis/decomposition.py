"""How attention uses content and position: self-attention logits split into additive terms.

For a self-attention layer whose input splits as ``X = Xc + Xp`` (``streams.py``: content +
position part, after the LayerNorm in pre-LN models), queries and keys are linear without bias,
so the unscaled logits split into four terms, per head:

    (Xc + Xp) Wq Wk^T (Xc + Xp)^T
        = Xc Wq Wk^T Xc^T   (token_token)       + Xc Wq Wk^T Xp^T   (token_position)
        + Xp Wq Wk^T Xc^T   (position_token)    + Xp Wq Wk^T Xp^T   (position_position)

A scheme that adds no position vectors has one such term, ``content`` = (X Wq)(X Wk)^T. Where
the scheme acts inside this attention (``kind in scheme.acts_in``) two more terms appear:

* ``qk_transform``: q.k after the scheme's q/k transform minus q.k before it (rope: rotated minus
  unrotated; Transformer-XL: u.k, its content bias), i.e. everything the transform changes;
* ``bias``: the scheme's logit bias times sqrt(head_dim). The model adds the bias after the
  1/sqrt(head_dim) scale, so in the unscaled units of the other terms it weighs sqrt(head_dim) more.

* the scheme's own logit terms (its ``extra_logits`` hook) times sqrt(head_dim), for schemes
  that compute attention themselves: FoX's ``forget_decay``, DAPE's ``dape_mlp``, CoPE's
  ``cope_position``. The scheme builds its attention from the same hook.

All terms are in unscaled dot-product units, and they sum to sqrt(head_dim) times the logits the
softmax receives (before masking), for every scheme. PoPE's transformed queries and keys are
twice as wide; its ``qk_transform`` is taken over that width, with the same 1/sqrt(head_dim).
Shaw with value embeddings also adds a value term to the attention output, which is not a
logit; such layers carry a ``note`` saying so (as do stick-breaking's, whose leftover weight goes
to the query's own value).

The softmax of the terms' sum over sqrt(head_dim), masked, is the layer's attention weights
(stick-breaking's own rule where it acts, ``PositionalScheme.attention_weights``):
``attention_weights``, with the distance each head attends over and its entropy.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from pe_research.analysis.streams import AttentionSite, trace_decoder, trace_encoder, trace_stack
from pe_research.analysis.vectors import HIGHEST, stack_name
from pe_research.model import TokenModel
from pe_research.model.single_stack import self_visible
from pe_research.positional import SCHEMES
from pe_research.positional.base import PositionalScheme
from pe_research.positional.explicit_attention import masked_softmax

ADDITIVE_TERMS = ("token_token", "token_position", "position_token", "position_position")
TERM_DESCRIPTIONS = {
    "token_token": "(Xc Wq)(Xc Wk)^T: content queries . content keys",
    "token_position": "(Xc Wq)(Xp Wk)^T: content queries . position keys",
    "position_token": "(Xp Wq)(Xc Wk)^T: position queries . content keys",
    "position_position": "(Xp Wq)(Xp Wk)^T: position queries . position keys",
    "content": "(X Wq)(X Wk)^T: q.k without any positional transform or bias",
    "qk_transform": "q.k after the scheme's q/k transform minus before it (rope: rotated - "
                    "unrotated; transformer_xl: u.k)",
    "bias": "the scheme's logit bias (its logit_bias hook) x sqrt(head_dim); the logits without "
            "bias are the other terms",
}
TERM_ORDER = (*ADDITIVE_TERMS, "content", "qk_transform", "bias")
UNITS = ("unscaled dot-product units: the terms sum to sqrt(head_dim) times the logits the "
         "softmax receives (before masking)")


def term_description(name: str) -> str:
    """What term ``name`` is: a generic term, or a scheme's own (``extra_logit_terms``)."""
    if name in TERM_DESCRIPTIONS:
        return TERM_DESCRIPTIONS[name]
    own = {term: text for scheme in SCHEMES.values()
           for term, text in scheme.extra_logit_terms.items()}
    return own[name] + " x sqrt(head_dim)"


def qk_logits(q_BxTxHxD: jax.Array, k_BxSxHxD: jax.Array) -> jax.Array:
    """Unscaled dot products ``[B, H, T, S]`` in float32 at full precision."""
    return jnp.einsum("bthd,bshd->bhts", q_BxTxHxD.astype(jnp.float32),
                      k_BxSxHxD.astype(jnp.float32), precision=HIGHEST)


def transforms_qk(scheme: PositionalScheme) -> bool:
    """Whether the scheme overrides the q/k transform hook."""
    return type(scheme).transform_qk is not PositionalScheme.transform_qk


def attention_terms(site: AttentionSite) -> dict[str, jax.Array]:
    """The additive terms ``[B, H, T, S]`` of one self-attention layer's logits (see module doc)."""
    attention, content, position = site.attention, site.seen.content, site.seen.position
    q_content, k_content = attention.query(content), attention.key(content)
    if position is None:
        terms = {"content": qk_logits(q_content, k_content)}
        q, k = q_content, k_content
    else:
        q_position, k_position = attention.query(position), attention.key(position)
        terms = {
            "token_token": qk_logits(q_content, k_content),
            "token_position": qk_logits(q_content, k_position),
            "position_token": qk_logits(q_position, k_content),
            "position_position": qk_logits(q_position, k_position),
        }
        q, k = q_content + q_position, k_content + k_position
    scheme, kind = site.scheme, attention.kind
    if kind in scheme.acts_in:
        q_moved, k_moved = scheme.transform_qk(q, k, site.positions, site.positions, kind)
        if transforms_qk(scheme) and not scheme.transform_carries_key_state:
            terms["qk_transform"] = qk_logits(q_moved, k_moved) - qk_logits(q, k)
        bias = scheme.logit_bias(q_moved, k_moved, site.positions, site.positions, kind)
        if bias is not None:
            terms["bias"] = bias.astype(jnp.float32) * math.sqrt(attention.head_dim)
        own = scheme.extra_logits(q_moved, k_moved, bias, site.mask, site.positions,
                                  site.positions, kind)
        for name, values in own.items():
            terms[name] = values.astype(jnp.float32) * math.sqrt(attention.head_dim)
    # A position-only term of positions shared by the batch is batch-1; every term gets the
    # batch, so terms add and index alike.
    shape = jnp.broadcast_shapes(*(t.shape for t in terms.values()))
    return {name: jnp.broadcast_to(t, shape) for name, t in terms.items()}


def attention_weights(terms: dict[str, Any], mask_BxTxS: Any, head_dim: int,
                      scheme: Any = None, kind: Any = None) -> jax.Array:
    """The layer's weights ``[B, H, T, S]``: the terms sum to sqrt(head_dim) x logits; the
    masked softmax of them, or ``scheme``'s own rule in ``kind`` (stick-breaking's)."""
    logits = sum(jnp.asarray(t, jnp.float32) for t in terms.values()) / math.sqrt(head_dim)
    mask = jnp.asarray(mask_BxTxS, bool)
    return masked_softmax(logits, mask) if scheme is None else \
        scheme.attention_weights(logits, mask, kind)


def weight_statistics(weights_BxHxTxS: Any, mask_BxTxS: Any) -> dict[str, list[float]]:
    """Per head, over queries that see a key: the mean distance attended, ``sum_s w[t, s] |t -
    s|`` in tokens, and the mean entropy of the weights in nats (0: one key; log n: uniform)."""
    weights = np.asarray(weights_BxHxTxS, np.float64)
    mask = np.asarray(mask_BxTxS, bool)
    queries = mask.any(axis=-1)[:, None]  # [B, 1, T]: padded queries see nothing
    count = np.maximum(np.broadcast_to(queries, weights.shape[:3]).sum(axis=(0, 2)), 1)
    t, s = np.arange(weights.shape[2]), np.arange(weights.shape[3])
    distance = np.sum(weights * np.abs(t[:, None] - s[None, :]), axis=-1)  # [B, H, T]
    entropy = -np.sum(np.where(mask[:, None], weights * np.log(np.maximum(weights, 1e-30)), 0.0),
                      axis=-1)
    return {"mean_distance": (np.sum(distance * queries, axis=(0, 2)) / count).tolist(),
            "mean_entropy": (np.sum(entropy * queries, axis=(0, 2)) / count).tolist()}


VALUE_TERM_NOTE = ("the scheme also adds a value term to the attention output (Shaw's "
                   "sum_j a_ij w^V[r_ij], stick-breaking's leftover weight on the query's own "
                   "value); the logit terms are complete")


def term_statistics(terms: dict[str, jax.Array], mask_BxTxS: jax.Array) -> dict[str, Any]:
    """Mean |term| per head over visible (query, key) pairs, and each term's share of the sum.

    share[term][h] = mean|term|[h] / sum over terms of mean|term|[h] (shares of magnitude, so they
    are in [0, 1] and add up to 1 even when terms cancel).
    """
    weights = np.asarray(mask_BxTxS, np.float64)[:, None]  # [B, 1, T, S]
    count = np.maximum(weights.sum(axis=(0, 2, 3)), 1.0)
    mean_abs = {name: np.sum(np.abs(np.asarray(t, np.float64)) * weights, axis=(0, 2, 3)) / count
                for name, t in terms.items()}
    total_H = np.maximum(sum(mean_abs.values()), 1e-30)
    logits = np.sum([np.asarray(t, np.float64) for t in terms.values()], axis=0)
    overall = {name: float(np.mean(v)) for name, v in mean_abs.items()}
    overall_total = max(sum(overall.values()), 1e-30)
    return {
        "mean_abs": {name: v.tolist() for name, v in mean_abs.items()},
        "share": {name: (v / total_H).tolist() for name, v in mean_abs.items()},
        "mean_abs_all_heads": overall,
        "share_all_heads": {name: v / overall_total for name, v in overall.items()},
        "mean_abs_logits": (np.sum(np.abs(logits) * weights, axis=(0, 2, 3)) / count).tolist(),
    }


def describe(terms: dict[str, Any]) -> str:
    """What a site's decomposition shows, from the terms it has."""
    if "token_token" in terms:
        shown = "four terms of (Xc+Xp) Wq Wk^T (Xc+Xp)^T"
    else:
        shown = "content term (the scheme adds no position vectors)"
    extras = [name for name in terms if name not in ("content", *ADDITIVE_TERMS)]
    return shown + ("" if not extras else " and the positional part: " + ", ".join(extras))


def self_attention_sites(model: TokenModel, source_BxS: jax.Array, target_input_BxT: jax.Array,
                         source_positions_BxS: jax.Array, target_positions_BxT: jax.Array,
                         source_mask_BxS: jax.Array, target_mask_BxT: jax.Array,
                         ) -> list[AttentionSite]:
    """Every self-attention layer, encoder layers first, then decoder (a single-stack model: its
    layers, over the joint sequence)."""
    if model.config.single_stack:
        tokens, positions, real = model.joint_inputs(
            source_BxS, model.target_side(target_input_BxT), source_positions_BxS,
            target_positions_BxT, source_mask_BxS, target_mask_BxT)
        return trace_stack(model, tokens, positions, self_visible(real, model.causal),
                           stack_name(model))
    encoder_sites, encoded = trace_encoder(model, source_BxS, source_positions_BxS,
                                           source_mask_BxS)
    decoder_sites, _ = trace_decoder(model, target_input_BxT, target_positions_BxT,
                                     encoded.total, source_positions_BxS, source_mask_BxS,
                                     target_mask_BxT)
    return encoder_sites + decoder_sites


def all_site_terms(model: TokenModel, *inputs: jax.Array,
                   ) -> list[tuple[dict[str, jax.Array], jax.Array]]:
    """``(terms, mask)`` of every self-attention layer, in ``self_attention_sites`` order;
    ``inputs`` as there (source, target input, their positions, their masks)."""
    return [(attention_terms(site), site.mask) for site in self_attention_sites(model, *inputs)]


# One compiled program per model structure and batch shape (eagerly, every op compiles apart).
_all_site_terms_jit = nnx.jit(all_site_terms)


def site_layers(model: TokenModel) -> list[tuple[str, int, Any, PositionalScheme]]:
    """``(stack, layer, attention, scheme)`` of each self-attention, in ``all_site_terms`` order."""
    if model.config.single_stack:
        return [(stack_name(model), i, layer.self_attention, layer.own_pe or model.pe)
                for i, layer in enumerate(model.layers)]
    sites = [("encoder", i, layer.self_attention, layer.own_pe or model.pe)
             for i, layer in enumerate(model.encoder_layers)]
    return sites + [("decoder", i, layer.self_attention, layer.own_pe or model.pe)
                    for i, layer in enumerate(model.decoder_layers)]


def decompose(model: TokenModel, batch: dict[str, Any], example: int = 0, *,
              source_positions_BxS: Any = None, target_positions_BxT: Any = None,
              ) -> list[dict[str, Any]]:
    """Every encoder and decoder self-attention layer of ``model`` on ``batch`` (a Batch dict).

    Positions default to ``0 .. n-1``. Returns one dict per layer: name, stack, layer, shown,
    note, terms (names), statistics, ``attention`` (``weight_statistics`` of the softmax
    weights), and for one example cut to its real length: ``example``, each term's ``[H, T, S]``
    map, ``example_weights``, the weights ``[H, T, S]``, and ``example_mask``, the visible pairs;
    ``weights``: the whole batch's weights ``[B, H, T, S]``.
    """
    source = jnp.asarray(batch["source"])
    target_input = jnp.asarray(batch["target_input"])
    source_mask = jnp.asarray(batch["source_mask"], bool)
    target_mask = jnp.asarray(batch["target_mask"], bool)
    source_positions = (jnp.broadcast_to(jnp.arange(source.shape[1]), source.shape)
                        if source_positions_BxS is None else jnp.asarray(source_positions_BxS))
    first_target = source.shape[1] if model.config.single_stack else 0  # packed joint positions
    target_positions = (
        first_target + jnp.broadcast_to(jnp.arange(target_input.shape[1]), target_input.shape)
        if target_positions_BxT is None else jnp.asarray(target_positions_BxT))
    computed = _all_site_terms_jit(model, source, target_input, source_positions,
                                   target_positions, source_mask, target_mask)
    sources, targets = (int(np.sum(np.asarray(m)[example])) for m in (source_mask, target_mask))
    # Each stack's real tokens, as (start, end) indices of its sequence.
    if model.config.single_stack:  # packed: the source, then the target side
        windows = {stack_name(model): (0, sources + targets)}
    else:
        windows = {"encoder": (0, sources), "decoder": (0, targets)}
    results = []
    for (stack, layer, attention, scheme), (terms, mask) in zip(site_layers(model), computed,
                                                                strict=True):
        order = [*(n for n in TERM_ORDER if n in terms), *(n for n in terms if n not in TERM_ORDER)]
        terms = {name: np.asarray(terms[name]) for name in order}
        mask, (start, end) = np.asarray(mask), windows[stack]
        weights = np.asarray(attention_weights(terms, mask, attention.head_dim, scheme,
                                               attention.kind))
        value_term = attention.kind in scheme.acts_in and scheme.adds_value_term
        results.append({
            "name": f"{stack}_self/layer_{layer}",
            "stack": stack,
            "layer": layer,
            "shown": describe(terms),
            "note": VALUE_TERM_NOTE if value_term else "",
            "terms": list(terms),
            "statistics": term_statistics(terms, mask),
            "attention": weight_statistics(weights, mask),
            "example": {name: t[example, :, start:end, start:end] for name, t in terms.items()},
            "example_weights": weights[example, :, start:end, start:end],
            "weights": weights,
            "example_mask": mask[example, start:end, start:end],
        })
    return results
