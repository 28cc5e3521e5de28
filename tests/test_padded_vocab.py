"""Members of different vocabularies in one program: padding, cropping and the masked loss."""

import jax
import jax.numpy as jnp
import numpy as np

from pe_research.model.metrics import token_cross_entropy
from pe_research.model.padded_vocab import crop_to, mask_logits, pad_to, widest


def test_padding_to_the_widest_vocabulary_and_cropping_back_give_the_member_state():
    own = {"embedding": jnp.arange(10.0).reshape(5, 2), "count": jnp.int32(3)}
    wide = {"embedding": jax.ShapeDtypeStruct((13, 2), jnp.float32),
            "count": jax.ShapeDtypeStruct((), jnp.int32)}
    padded = pad_to(own, wide)
    assert padded["embedding"].shape == (13, 2)
    np.testing.assert_array_equal(padded["embedding"][5:], 0.0)
    back = crop_to(padded, jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), own))
    np.testing.assert_array_equal(back["embedding"], own["embedding"])
    assert widest([5, 13, 8, 13]) == 1


def test_the_masked_loss_is_the_narrow_models_loss_and_sends_no_gradient_beyond_it():
    logits = jax.random.normal(jax.random.key(0), (2, 3, 13)) * 3
    targets = jnp.asarray([[0, 4, 2], [3, 1, 4]], jnp.int32)
    mask = jnp.asarray([[True, True, False], [True, True, True]])

    def masked(x):
        return token_cross_entropy(mask_logits(x, 5), targets, mask)

    # The written-out loss over the first 5 tokens: logsumexp minus the target's logit.
    narrow = np.asarray(logits[..., :5], np.float64)
    per_token = np.log(np.exp(narrow).sum(-1)) - np.take_along_axis(
        narrow, np.asarray(targets)[..., None], -1)[..., 0]
    expected = (per_token * np.asarray(mask)).sum() / np.asarray(mask).sum()
    np.testing.assert_allclose(masked(logits), expected, rtol=1e-6)
    grads = jax.grad(masked)(logits)
    assert np.all(np.asarray(grads[..., 5:]) == 0.0)
    assert np.all(np.isfinite(np.asarray(grads)))
    np.testing.assert_allclose(grads[..., :5], jax.grad(
        lambda x: token_cross_entropy(x, targets, mask))(logits[..., :5]), rtol=1e-6, atol=1e-8)
