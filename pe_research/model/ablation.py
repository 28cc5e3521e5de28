"""Head ablation: ``model.ablated_heads`` names attention heads whose output is zeroed.

A zeroed head adds nothing to the residual stream (its slice of the output projection's input
is 0), so every later layer sees the model without it; its own attention weights are unchanged.
The key changes no weight shape, so a trained run can be evaluated with heads ablated.

Syntax: comma-separated ``SITE:HEAD`` entries, heads counted from 0.

* single-stack models (encoder-only, decoder-only): ``LAYER:HEAD``, e.g. ``2:1,2:3``;
* the encoder-decoder: ``encoder.LAYER:HEAD``, ``decoder.LAYER:HEAD`` (decoder
  self-attention) and ``cross.LAYER:HEAD`` (cross-attention).
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

from pe_research.core.errors import ConfigError

KEY = "model.ablated_heads"
SINGLE_STACK_SITE = "self"


def site_layers(architecture: str, num_encoder_layers: int,
                num_decoder_layers: int) -> dict[str, int]:
    """Number of layers of each attention site name of ``architecture``."""
    if architecture == "encoder_decoder":
        return {"encoder": num_encoder_layers, "decoder": num_decoder_layers,
                "cross": num_decoder_layers}
    layers = num_decoder_layers if architecture == "decoder_only" else num_encoder_layers
    return {SINGLE_STACK_SITE: layers}


def parse_ablated_heads(text: str, layers: dict[str, int], num_heads: int,
                        ) -> dict[tuple[str, int], tuple[int, ...]]:
    """``{(site, layer): heads}`` from ``model.ablated_heads`` (ConfigError naming the entry)."""
    single = set(layers) == {SINGLE_STACK_SITE}
    form = ("LAYER:HEAD" if single else
            "encoder.LAYER:HEAD, decoder.LAYER:HEAD or cross.LAYER:HEAD")
    ablated: dict[tuple[str, int], set[int]] = {}
    for entry in (part.strip() for part in str(text).split(",")):
        if not entry:
            continue
        where, _, head_text = entry.partition(":")
        site, _, layer_text = where.rpartition(".")
        site = site or SINGLE_STACK_SITE
        if not (head_text.isdigit() and layer_text.isdigit()) or site not in layers:
            raise ConfigError(KEY, text, f"entry {entry!r} is not {form} (comma-separated, "
                              "counted from 0)")
        layer, head = int(layer_text), int(head_text)
        if layer >= layers[site]:
            raise ConfigError(KEY, text, f"entry {entry!r}: layer {layer} does not exist; the "
                              f"model has {layers[site]} (0 to {layers[site] - 1})")
        if head >= num_heads:
            raise ConfigError(KEY, text, f"entry {entry!r}: head {head} does not exist; the "
                              f"model has {num_heads} (0 to {num_heads - 1})")
        ablated.setdefault((site, layer), set()).add(head)
    return {place: tuple(sorted(heads)) for place, heads in ablated.items()}


def attention_at(model: Any, site: str, layer: int) -> Any:
    """The ``MultiHeadAttention`` of ``site`` (``self``, ``encoder``, ``decoder``, ``cross``)
    in ``layer`` of a built model."""
    if site == SINGLE_STACK_SITE:
        return model.layers[layer].self_attention
    if site == "encoder":
        return model.encoder_layers[layer].self_attention
    decoder = model.decoder_layers[layer]
    return decoder.cross_attention if site == "cross" else decoder.self_attention


def params_with_head_zeroed(graphdef: Any, params: Any, rest: Any, site: str, layer: int,
                            head: int) -> Any:
    """``params`` with the head's rows of the output projection zeroed: the same model as
    ``model.ablated_heads`` of that head, as a parameter change (no recompilation); ``params``
    itself is left as it was."""
    copied = jax.tree.map(lambda leaf: leaf, params)  # new Variables around the same arrays
    output = attention_at(nnx.merge(graphdef, copied, rest), site, layer).output
    output.kernel[...] = output.kernel[...].at[head].set(0)  # kernel [H, Dh, d_model]
    return copied
