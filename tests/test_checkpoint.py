"""Orbax wrapper: round trip, latest-K + best retention and the order a restore tries steps in,
corrupt steps skipped, restore target."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from pe_research.core.errors import ConfigError
from pe_research.runs.checkpoint import CORRUPT_DIR, Checkpointer, abstract_like
from pe_research.runs.restore import candidate_steps


def _state(scale: float):
    params = {"dense": {"kernel": jnp.arange(6.0).reshape(2, 3) * scale},
              "bias": jnp.full((3,), scale)}
    opt_state = optax.adam(1e-3).init(params)
    return params, opt_state


def _save(checkpointer: Checkpointer, step: int, metric: float | None = None) -> None:
    params, opt_state = _state(float(step))
    checkpointer.save(step, params=params, opt_state=opt_state,
                      meta={"step": step, "data_step": step}, config={"seed": 0},
                      metrics=None if metric is None else {"eval/sequence_accuracy": metric})


def test_round_trip_restores_every_item(tmp_path):
    checkpointer = Checkpointer(tmp_path / "ckpt", keep=3)
    _save(checkpointer, 7)
    checkpointer.wait()
    params, opt_state = _state(0.0)
    step, items = checkpointer.restore_latest_good(params=abstract_like(params),
                                                   opt_state=abstract_like(opt_state))
    expected_params, expected_opt = _state(7.0)
    assert step == 7 and items["meta"] == {"step": 7, "data_step": 7}
    assert items["config"] == {"seed": 0}
    np.testing.assert_array_equal(items["params"]["dense"]["kernel"],
                                  expected_params["dense"]["kernel"])
    assert jax.tree.structure(items["opt_state"]) == jax.tree.structure(expected_opt)
    checkpointer.close()


def test_keeps_latest_k_and_the_best(tmp_path):
    checkpointer = Checkpointer(tmp_path / "ckpt", keep=2, best_metric="eval/sequence_accuracy",
                                best_mode="max")
    for step, metric in zip(range(1, 6), [0.1, 0.9, 0.2, 0.3, 0.4], strict=True):
        _save(checkpointer, step, metric)
    checkpointer.wait()
    assert checkpointer.steps() == [2, 4, 5]
    assert checkpointer.best_step() == 2
    # What a restore tries, in order: the step asked for, then the others newest first.
    assert candidate_steps(checkpointer, "best") == [2, 5, 4]
    assert candidate_steps(checkpointer, "latest") == [5, 4, 2]
    assert candidate_steps(checkpointer, "4") == [4]
    checkpointer.close()


def test_a_step_saved_between_evaluations_is_kept_without_a_warning(tmp_path, caplog):
    checkpointer = Checkpointer(tmp_path / "ckpt", keep=2, best_metric="eval/sequence_accuracy")
    _save(checkpointer, 1, 0.5)
    _save(checkpointer, 2)  # no metrics: a step between evaluations, or a preemption's
    checkpointer.wait()
    assert checkpointer.steps() == [1, 2] and checkpointer.best_step() == 1
    assert not [r for r in caplog.records if "metrics" in r.getMessage()]
    checkpointer.close()


def test_best_by_minimum_for_losses(tmp_path):
    checkpointer = Checkpointer(tmp_path / "ckpt", keep=1, best_metric="eval/loss",
                                best_mode="min")
    for step, loss in zip(range(1, 5), [3.0, 1.0, 2.0, 2.5], strict=True):
        params, opt_state = _state(float(step))
        checkpointer.save(step, params=params, opt_state=opt_state, meta={"step": step},
                          config={}, metrics={"eval/loss": loss})
    checkpointer.wait()
    assert checkpointer.steps() == [2, 4]
    assert checkpointer.best_step() == 2
    checkpointer.close()


@pytest.mark.parametrize(("pattern", "damage"), [
    ("params/d/*", "truncate"),  # array data cut short
    ("params/manifest.ocdbt", "delete"),  # the index of the array data
    ("opt_state/d/*", "delete"),
    ("meta/metadata", "truncate"),  # step / data position JSON
])
def test_corrupt_latest_step_falls_back_to_previous(tmp_path, pattern, damage, capsys):
    directory = tmp_path / "ckpt"
    checkpointer = Checkpointer(directory, keep=3)
    for step in (1, 2):
        _save(checkpointer, step)
    checkpointer.close()
    victims = list((directory / "2").glob(pattern))
    assert victims
    for victim in victims:
        if damage == "truncate":
            victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
        else:
            victim.unlink()

    reopened = Checkpointer(directory, keep=3)
    params, opt_state = _state(0.0)
    capsys.readouterr()
    step, items = reopened.restore_latest_good(
        params=abstract_like(params), opt_state=abstract_like(opt_state), quarantine=True)
    assert step == 1
    (line,) = capsys.readouterr().err.splitlines()  # one line, no traceback
    assert re.fullmatch(r"warning: checkpoint step 2 in \S+ is unreadable \(.+\); using step 1 "
                        r"instead", line), line
    np.testing.assert_array_equal(items["params"]["bias"], np.full((3,), 1.0))
    assert reopened.steps() == [1]  # the broken step moved aside, so step 2 can be written again
    assert len(list((tmp_path / CORRUPT_DIR).iterdir())) == 1
    _save(reopened, 2)
    reopened.close()


def test_restore_onto_an_explicit_device_target(tmp_path):
    checkpointer = Checkpointer(tmp_path / "ckpt", keep=1)
    _save(checkpointer, 3)
    checkpointer.close()
    device = jax.devices()[-1]
    params, _ = _state(0.0)
    target = abstract_like(params, jax.sharding.SingleDeviceSharding(device))
    items = Checkpointer(tmp_path / "ckpt", read_only=True).restore(3, params=target)
    assert items["params"]["bias"].devices() == {device}
    np.testing.assert_array_equal(items["params"]["bias"], np.full((3,), 3.0))


def test_a_readable_step_of_another_structure_is_refused_not_quarantined(tmp_path):
    """A checkpoint of a different optimizer chain is not corrupt: it must never be moved."""
    checkpointer = Checkpointer(tmp_path / "ckpt", async_save=False)
    _save(checkpointer, 5)
    params, opt_state = _state(1.0)
    chained = optax.chain(optax.identity(), optax.adam(1e-3)).init(params)
    with pytest.raises(ConfigError, match="step 5 .* different parameter or optimizer-state"):
        checkpointer.restore_latest_good(params=abstract_like(params),
                                         opt_state=abstract_like(chained), quarantine=True)
    assert checkpointer.steps() == [5]
    assert not (tmp_path / CORRUPT_DIR).exists()
    checkpointer.close()
