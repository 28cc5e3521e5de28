"""The attention decomposition adds up to the logits the model itself computes, for every scheme."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_models import CORE_SCHEMES, VOCAB, arange_positions, tiny_config, tiny_model

import pe_research.model.attention as model_attention
from pe_research.analysis.decomposition import (
    ADDITIVE_TERMS,
    all_site_terms,
    attention_terms,
    attention_weights,
    decompose,
    qk_logits,
    self_attention_sites,
    term_description,
    weight_statistics,
)
from pe_research.analysis.streams import Split, split_layer_norm, trace_encoder
from pe_research.analysis.vectors import input_parts
from pe_research.model import SingleStackTransformer
from pe_research.positional import SCHEMES
from pe_research.positional.explicit_attention import own_slots, weighted_values


def tiny_batch(seed: int = 0, batch: int = 2, source_len: int = 7, target_len: int = 6):
    """A Batch dict with padding in the second example (lengths 7/5 source, 6/4 target)."""
    rng = np.random.default_rng(seed)
    source = rng.integers(3, VOCAB, (batch, source_len)).astype(np.int32)
    target_input = rng.integers(3, VOCAB, (batch, target_len)).astype(np.int32)
    source_mask = np.ones((batch, source_len), bool)
    target_mask = np.ones((batch, target_len), bool)
    source_mask[1, 5:] = False
    target_mask[1, 4:] = False
    source[~source_mask] = 0
    target_input[~target_mask] = 0
    return {"source": source, "source_mask": source_mask, "target_input": target_input,
            "target_mask": target_mask}


def captured_logits(model, batch, monkeypatch):
    """q.k + sqrt(Dh) * bias of every attention call the real model makes, in call order."""
    calls = []
    original = model_attention.attention  # the xla path's kernel

    def spy(query, key, value, bias, mask):
        full = qk_logits(query, key)
        if bias is not None:
            full = full + bias * math.sqrt(query.shape[-1])
        calls.append(np.asarray(full))
        return original(query, key, value, bias, mask)

    monkeypatch.setattr(model_attention, "attention", spy)
    source = jnp.asarray(batch["source"])
    target = jnp.asarray(batch["target_input"])
    model(source, target, arange_positions(*source.shape), arange_positions(*target.shape),
          jnp.asarray(batch["source_mask"]), jnp.asarray(batch["target_mask"]))
    monkeypatch.undo()
    encoder_calls = len(model.encoder_layers)
    decoder_self = calls[encoder_calls::2]  # decoder layers call self then cross attention
    return calls[:encoder_calls] + decoder_self


def site_terms(model, batch):
    """Every self-attention layer's terms over the whole batch (padding included), eagerly."""
    source, target = jnp.asarray(batch["source"]), jnp.asarray(batch["target_input"])
    return all_site_terms(model, source, target, arange_positions(*source.shape),
                          arange_positions(*target.shape), jnp.asarray(batch["source_mask"]),
                          jnp.asarray(batch["target_mask"]))


ADDITIVE, CONTENT = list(ADDITIVE_TERMS), ["content"]
TERMS = {"none": CONTENT, "sinusoidal": ADDITIVE, "learned": ADDITIVE,
         **{scheme: [*CONTENT, "qk_transform"] for scheme in ("rope", "xpos")},
         **{scheme: [*CONTENT, "bias"] for scheme in ("alibi", "t5", "kerple_log", "fire",
                                                      "shaw")},
         "transformer_xl": [*CONTENT, "qk_transform", "bias"]}  # u . k, then the position term
# Schemes on the fused attention path (the spy sees their logits); cope and shaw with value
# vectors compute attention themselves and are covered by the note test below. Two layers per
# stack where the content part includes earlier sublayers' outputs.
CASES = [(scheme, "pre", {}, 1) for scheme in [*CORE_SCHEMES, "transformer_xl", "kerple_log",
                                                "fire", "xpos"]] + [
    ("sinusoidal", "pre", {}, 2), ("sinusoidal", "post", {}, 2),
    ("learned", "pre", {"combine": "concat"}, 2), ("rope", "post", {}, 2),
    ("sinusoidal", "post", {"combine": "concat"}, 1),
    ("shaw", "pre", {"value_embeddings": False}, 1)]


@pytest.mark.parametrize(("scheme", "norm", "pe", "layers"), CASES)
def test_terms_sum_to_the_models_logits(scheme, norm, pe, layers, monkeypatch):
    model = tiny_model(scheme, norm=norm, num_encoder_layers=layers, num_decoder_layers=layers,
                       pe=pe)
    batch = tiny_batch()
    reference = captured_logits(model, batch, monkeypatch)
    computed = site_terms(model, batch)
    assert len(computed) == len(reference) == 2 * layers
    for (terms, _), full in zip(computed, reference, strict=True):
        assert list(terms) == TERMS[scheme]
        np.testing.assert_allclose(sum(terms.values()), full, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scheme", ["sinusoidal", "t5"])
def test_decompose_reports_one_example_and_statistics_of_the_batch(scheme):
    model = tiny_model(scheme, num_encoder_layers=2)
    batch = tiny_batch()
    sites = decompose(model, batch, example=1)  # the padded example: 5 source, 4 target tokens
    assert [s["name"] for s in sites] == [
        "encoder_self/layer_0", "encoder_self/layer_1", "decoder_self/layer_0"]
    for site, (terms, mask) in zip(sites, site_terms(model, batch), strict=True):
        assert site["terms"] == TERMS[scheme] == list(site["example"])
        length = 5 if site["stack"] == "encoder" else 4
        for name, values in terms.items():
            np.testing.assert_allclose(site["example"][name],
                                       values[1, :, :length, :length], rtol=1e-4, atol=1e-5)
            visible = np.broadcast_to(np.asarray(mask)[:, None], values.shape)
            per_head = [np.abs(np.asarray(values)[:, h][visible[:, h]]).mean()
                        for h in range(values.shape[1])]
            np.testing.assert_allclose(site["statistics"]["mean_abs"][name], per_head, rtol=1e-4)
        share = site["statistics"]["share"]
        np.testing.assert_allclose(np.sum([share[n] for n in site["terms"]], axis=0), 1.0)
        causal = site["stack"] == "decoder"
        assert bool(np.all(np.triu(site["example_mask"], 1) == 0)) == causal


def test_position_terms_of_a_post_ln_first_layer_match_the_formula():
    """Post-LN layer 0 sees token + sinusoid directly: position_position is P Wq Wk^T P^T."""
    model = tiny_model("sinusoidal", norm="post", scale_embedding=False)
    batch = tiny_batch()
    site = decompose(model, batch, example=0)[0]
    attention = model.encoder_layers[0].self_attention
    table = np.stack([[np.sin(p / 10_000 ** (2 * i / 16)) if c == 0 else
                       np.cos(p / 10_000 ** (2 * i / 16)) for i in range(8) for c in (0, 1)]
                      for p in range(7)])
    q = np.einsum("td,dhe->the", table, np.asarray(attention.query.kernel[...]))
    k = np.einsum("td,dhe->the", table, np.asarray(attention.key.kernel[...]))
    np.testing.assert_allclose(site["example"]["position_position"],
                               np.einsum("the,she->hts", q, k), rtol=1e-4, atol=1e-5)
    tokens = np.asarray(model.embed.embedding[...])[batch["source"][0]]
    k_token = np.einsum("td,dhe->the", tokens, np.asarray(attention.key.kernel[...]))
    np.testing.assert_allclose(site["example"]["position_token"],
                               np.einsum("the,she->hts", q, k_token), rtol=1e-4, atol=1e-5)


def attention_from_terms(site, terms) -> np.ndarray:
    """The layer's output rebuilt from its terms: softmax(sum / sqrt(D)) . v (stick-breaking:
    its weights . v, plus the leftover weight on the query's own value), projected."""
    attention, x = site.attention, site.seen.total
    probs = attention_weights(terms, site.mask, attention.head_dim, site.scheme, attention.kind)
    values = attention.value(x)
    out = weighted_values(probs, values)
    if site.scheme.name == "stick_breaking" and attention.kind in site.scheme.acts_in:
        own_value = jnp.take_along_axis(values, own_slots(site.mask)[:, :, None, None], axis=1)
        out = out + jnp.moveaxis(1 - probs.sum(-1), 1, 2)[..., None] * own_value
    return attention.output(out)


ARCHITECTURE_CASES = [(scheme, "encoder_decoder") for scheme in sorted(SCHEMES)] + [
    (scheme, "decoder_only") for scheme in ("fox", "cope", "dape", "pope", "alibi")]


@pytest.mark.parametrize(("scheme", "architecture"), ARCHITECTURE_CASES)
def test_terms_rebuild_every_schemes_attention_output(scheme, architecture):
    """Every scheme, fused or explicit (FoX, DAPE, CoPE, PoPE): its terms are all the logits.
    Decoder-only models put padding before the source tokens, the layout FoX must sum around."""
    pe = {"value_embeddings": False} if scheme == "shaw" else {}
    if architecture == "encoder_decoder":
        model = tiny_model(scheme, pe=pe)
    else:
        model = SingleStackTransformer(tiny_config(scheme, pe=pe, architecture=architecture),
                                       rngs=nnx.Rngs(0))
    batch = tiny_batch()
    inputs = [jnp.asarray(batch[k]) for k in ("source", "target_input")]
    inputs += [arange_positions(*inputs[0].shape), arange_positions(*inputs[1].shape)]
    inputs += [jnp.asarray(batch[k]) for k in ("source_mask", "target_mask")]
    for site in self_attention_sites(model, *inputs):
        terms = attention_terms(site)
        own = set(site.scheme.extra_logit_terms) if site.attention.kind in site.scheme.acts_in \
            else set()
        assert own <= set(terms)
        x = site.seen.total
        expected = site.attention(x, x, site.positions, site.positions, site.mask, site.scheme)
        rows = np.asarray(jnp.any(site.mask, axis=-1))  # padded queries see nothing
        np.testing.assert_allclose(np.asarray(attention_from_terms(site, terms))[rows],
                                   np.asarray(expected)[rows], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("scheme", "terms"), [("fox", "forget_decay"), ("dape", "dape_mlp"),
                                               ("cope", "cope_position")])
def test_explicit_schemes_show_their_own_terms_with_a_description(scheme, terms):
    sites = decompose(tiny_model(scheme), tiny_batch())
    acting = [s for s in sites if s["stack"] == "decoder" or scheme == "dape"]
    assert all(terms in s["terms"] and s["note"] == "" for s in acting)
    assert term_description(terms).endswith("x sqrt(head_dim)")
    if scheme != "dape":  # fox and cope act only in the decoder
        assert terms not in sites[0]["terms"]


def test_fox_decay_is_zero_on_the_diagonal_and_negative_below_with_leading_padding():
    """sum_{l=j+1..i} log f_l exactly: no constant offset from the padding before the source."""
    model = SingleStackTransformer(tiny_config("fox", architecture="decoder_only"),
                                   rngs=nnx.Rngs(0))
    for site in decompose(model, tiny_batch(), example=1):  # 2 padding slots before the source
        assert "qk_transform" not in site["terms"]  # the transform only carries log f along
        decay, visible = site["example"]["forget_decay"], site["example_mask"]
        np.testing.assert_allclose(np.diagonal(decay, axis1=1, axis2=2), 0.0, atol=1e-5)
        assert np.all(decay[:, visible] <= 1e-5) and np.any(decay[:, visible] < -1e-3)


def test_shaw_value_embeddings_are_noted():
    sites = decompose(tiny_model("shaw"), tiny_batch())
    assert all("value term" in s["note"] for s in sites)
    plain = decompose(tiny_model("shaw", pe={"value_embeddings": False}), tiny_batch())
    assert all(s["note"] == "" for s in plain)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_traced_streams_reproduce_the_model(norm):
    model = tiny_model("sinusoidal", norm=norm, num_encoder_layers=2)
    batch = tiny_batch()
    source, mask = jnp.asarray(batch["source"]), jnp.asarray(batch["source_mask"])
    positions = arange_positions(*source.shape)
    _, encoded = trace_encoder(model, source, positions, mask)
    np.testing.assert_allclose(encoded.total, model.encode(source, positions, mask), atol=1e-5)


def test_layer_norm_split_adds_up_and_puts_the_bias_with_content():
    norm = nnx.LayerNorm(8, rngs=nnx.Rngs(0))
    norm.scale[...] = jnp.linspace(0.5, 2.0, 8)
    norm.bias[...] = jnp.linspace(-1.0, 1.0, 8)
    rng = np.random.default_rng(0)
    content, position = (jnp.asarray(rng.normal(size=(2, 3, 8)), jnp.float32) for _ in range(2))
    split = split_layer_norm(norm, Split(content, position))
    np.testing.assert_allclose(split.total, norm(content + position), atol=1e-5)
    zero = split_layer_norm(norm, Split(content, jnp.zeros_like(position)))
    np.testing.assert_allclose(zero.position, 0.0)  # no position in, no position out
    np.testing.assert_allclose(zero.content, norm(content), atol=1e-5)


@pytest.mark.parametrize("combine", ["add", "concat"])
def test_input_parts_sum_to_the_models_embedding(combine):
    model = tiny_model("learned", pe={"combine": combine})
    tokens = jnp.asarray([[3, 4, 5, 6]])
    positions = arange_positions(1, 4, offset=2)
    token, position = input_parts(model, tokens, positions)
    np.testing.assert_allclose(token + position, model.embed_inputs(tokens, positions, None),
                               atol=1e-5)


def test_weight_statistics_of_one_hot_and_uniform_causal_weights():
    """One key at distance 2 (clipped to key 0 early on), and uniform over the causal past."""
    T = 6
    mask = np.tril(np.ones((1, T, T), bool))
    mask[0, 5] = False  # a padded query: left out of both means
    one_hot = np.zeros((1, 2, T, T))
    for t in range(T):
        one_hot[0, 0, t, max(t - 2, 0)] = 1.0
    one_hot[0, 1] = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    stats = weight_statistics(one_hot, mask)
    # Queries 0-4: distances 0, 1, 2, 2, 2 for head 0; t/2 for uniform head 1.
    np.testing.assert_allclose(stats["mean_distance"], [7 / 5, np.mean(np.arange(5) / 2)])
    np.testing.assert_allclose(stats["mean_entropy"], [0.0, np.mean(np.log(np.arange(1, 6)))],
                               atol=1e-12)


def test_decompose_gives_the_softmax_weights_of_its_terms():
    model = tiny_model("t5", num_encoder_layers=1)
    batch = tiny_batch()
    sites = decompose(model, batch, example=1)
    for site, (terms, mask) in zip(sites, site_terms(model, batch), strict=True):
        logits = sum(np.asarray(t, np.float64) for t in terms.values()) / math.sqrt(8)
        logits = np.where(np.asarray(mask)[:, None], logits, -np.inf)
        expected = np.exp(logits - logits.max(-1, keepdims=True))
        expected /= expected.sum(-1, keepdims=True)
        rows = np.asarray(mask).any(-1)  # padded queries see nothing
        np.testing.assert_allclose(site["weights"].transpose(0, 2, 1, 3)[rows],
                                   expected.transpose(0, 2, 1, 3)[rows], atol=1e-6)
        length = 5 if site["stack"] == "encoder" else 4
        np.testing.assert_array_equal(site["example_weights"],
                                      site["weights"][1, :, :length, :length])
        np.testing.assert_allclose(site["attention"]["mean_distance"],
                                   weight_statistics(site["weights"], mask)["mean_distance"])
