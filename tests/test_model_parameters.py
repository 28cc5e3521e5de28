"""Every parameter of the model is used: per-layer schemes leave no dead copies behind."""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from tiny_models import forward, random_inputs, tiny_model

from pe_research.evaluation.metrics import token_cross_entropy
from pe_research.positional import SCHEMES


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_every_parameter_gets_a_gradient(scheme):
    model = tiny_model(scheme)
    source, target = random_inputs()
    graph, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(params):
        logits = forward(nnx.merge(graph, params, rest), source, target)
        return token_cross_entropy(logits, target, jnp.ones(target.shape, bool))

    grads = jax.grad(loss)(params)
    flat = jax.tree_util.tree_flatten_with_path(grads)[0]
    dead = [jax.tree_util.keystr(path) for path, g in flat if not jnp.any(g != 0)]
    assert dead == [], f"{scheme}: parameters without gradient: {dead}"
