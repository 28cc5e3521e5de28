"""Grid points that can stack share a program, up to a cap; nothing else does."""

import pytest
from conftest import REPO
from sweep_files import write_sweep

from pe_research.config import from_mapping
from pe_research.config.stacking import first_difference, program_key
from pe_research.core.errors import ConfigError
from pe_research.sweeps.grouping import (
    MEMBERS_PER_PROGRAM,
    check_members_per_program,
    group_points,
    members_cap,
    widest_train_batch,
)
from pe_research.sweeps.spec import load_sweep
from pe_research.training.member_checks import check_members, member_shapes

GRID = ('product({"model.d_ff": [32, 64], "task.name": ["reverse_string", "copy", '
        '"bucket_sort"]})')


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return load_sweep(write_sweep(tmp_path_factory.mktemp("grouping") / "s.py", grid=GRID))


def test_points_that_differ_in_task_share_programs_up_to_the_cap_and_shapes_never_mix(plan):
    indices = [point.index for point in plan.points]
    assert group_points(plan.points, indices, 8) == [[0, 1, 2], [3, 4, 5]]  # 6 members each
    assert group_points(plan.points, indices, 4) == [[0, 1], [2], [3, 4], [5]]
    assert group_points(plan.points, indices, 0) == [[i] for i in indices]
    assert group_points(plan.points, [1, 4, 5], 8) == [[1], [4, 5]]  # finished points left out
    # points with runs left to train (resumed, or given more seeds) count only those
    assert group_points(plan.points, indices, 4, {i: 1 for i in indices}) == [[0, 1, 2],
                                                                                  [3, 4, 5]]
    assert group_points(plan.points, [0, 1, 2], 4, {0: 1, 1: 1, 2: 2}) == [[0, 1, 2]]
    vocabularies = {"reverse_string": 5, "copy": 13, "bucket_sort": 8}
    for group in group_points(plan.points, indices, 8):
        configs = [from_mapping(member.config) for index in group
                   for member in plan.points[index].members]
        check_members(configs)  # the ensemble accepts the group
        member_shapes(configs, [vocabularies[c.task.name] for c in configs])
        assert len({c.model.d_ff for c in configs}) == 1


def test_a_models_points_fill_programs_in_the_order_of_their_widest_batch(tmp_path):
    grid = ('product({"task.name": ["duplicate_string", "even_pairs", "reverse_string", '
            '"parity_check"]})')
    plan = load_sweep(write_sweep(tmp_path / "s.py", grid=grid,
                                  **{"data.train_lengths": "(1, 40)",
                                     "data.buckets": "(16, 32, 64)"}))
    # (joint, source, target) at length 40, EOS included, widths to multiples of 8: the source
    # bucket 64; answers of 1, 40 and 80 tokens; joint rows of 42, 82 and 122 tokens
    widths = [widest_train_batch(point.members[0].config) for point in plan.points]
    assert widths == [(128, 64, 88), (48, 64, 8), (88, 64, 48), (48, 64, 8)]
    # grid order would stack duplicate_string with even_pairs (every step 128 columns wide)
    assert group_points(plan.points, [0, 1, 2, 3], 4) == [[0, 2], [1, 3]]
    assert group_points(plan.points, [0, 1, 2, 3], 6) == [[0], [1, 2, 3]]  # in grid order
    assert group_points(plan.points, [0, 1, 2, 3], 6, {0: 1, 2: 1, 3: 1}) == [[0, 1, 2, 3]]
    assert group_points(plan.points, [0, 2, 3], 4) == [[0], [2, 3]]


def test_a_point_larger_than_the_cap_keeps_a_program_of_its_own(plan):
    assert group_points(plan.points, [0, 1, 2], 1) == [[0], [1], [2]]


def test_the_cap_is_the_measured_one_for_the_device_the_jobs_get():
    assert members_cap("auto", "local", {}) == MEMBERS_PER_PROGRAM["cpu"]
    assert members_cap("auto", "slurm", {"gpus_per_job": 1}) == MEMBERS_PER_PROGRAM["gpu"]
    assert members_cap("point", "local", {}) == 0
    assert members_cap(16, "slurm", {}) == 16
    assert check_members_per_program("12") == 12
    for bad in ("0", "many", -3, True):
        with pytest.raises(ConfigError, match="--members-per-program"):
            check_members_per_program(bad)


def test_points_of_any_randomized_ranges_share_a_program(tmp_path):
    grid = ('[{"model.pe.randomize.max_position": 0}, {"model.pe.randomize.max_position": 64}, '
            '{"model.pe.randomize.max_position": 128}, {"model.pe.randomize.per": "batch"}]')
    plan = load_sweep(write_sweep(tmp_path / "s.py", grid=grid))
    assert group_points(plan.points, [0, 1, 2, 3], 8) == [[0, 1, 2], [3]]


def test_the_papers_table_and_its_pilot_stack_a_schemes_cells_on_a_gpu():
    cap = MEMBERS_PER_PROGRAM["gpu"]
    table = load_sweep(REPO / "configs/sweeps/randomized_pe_table.py")
    groups = group_points(table.points, [point.index for point in table.points], cap)
    assert (len(table.points), table.runs, len(groups)) == (165, 1650, 55)
    assert {sum(len(table.points[i].members) for i in group) for group in groups} == {30}
    pilot = load_sweep(REPO / "configs/sweeps/randomized_pe_pilot.py")
    assert group_points(pilot.points, [0, 1], cap) == [[0, 1]]  # both arms, 3 seeds each
    config = from_mapping(pilot.points[1].members[0].config)
    assert (config.task.name, config.model.pe.type, config.model.pe.randomize.max_position,
            config.train.steps) == ("reverse_string", "rope", 2048, 100_000)
    assert tuple(config.eval.lengths) == tuple(range(1, 501))  # the paper's uniform average


def test_points_that_differ_in_optimizer_settings_scoring_sampling_source_or_base_share_a_program(
        tmp_path):
    grid = ('[{"train.weight_decay": 0.1}, {"train.clip_norm": 0.5}, '
            '{"train.schedule": "cosine"}, {"model.dropout_rate": 0.2}, '
            '{"model.pe.max_wavelength": 500.0}, {"train.warmup_steps": 3}, '
            '{"train.predict_eos": False}, {"data.length_sampling": "mixed"}, '
            '{"train.init_from": "runs/source_{seed}"}, {"train.steps": 30}]')
    plan = load_sweep(write_sweep(tmp_path / "s.py", grid=grid))
    assert group_points(plan.points, list(range(10)), 18) == [[0, 1, 2, 3, 4, 5, 6, 7, 8], [9]]


def test_a_base_stacks_unless_per_layer_schemes_may_carry_their_own():
    def config(base: float, layers: tuple = ()):
        return {"seed": 0, "model": {"pe": {"type": "rope", "max_wavelength": base,
                                            "layers": layers}}}

    assert first_difference(config(500.0), config(1e4)) is None
    assert program_key(config(500.0)) == program_key(config(1e4))
    layered = ("rope", {"type": "xpos", "max_wavelength": 100.0})
    assert first_difference(config(500.0, layered), config(1e4, layered)) == \
        "model.pe.max_wavelength"
    assert program_key(config(500.0, layered)) != program_key(config(1e4, layered))


def test_rope_scalings_and_log_n_stack_and_ssmax_keeps_its_program(tmp_path):
    """The RoPE fine-tuning study's methods share one program, as do plain and log-n logits;
    Scalable-Softmax's parameters keep it apart, and per-layer schemes keep scalings apart."""
    grid = ('[{"model.pe.scaling.type": "none"}, {"model.pe.scaling.type": "pi"}, '
            '{"model.pe.scaling.type": "ntk", "model.pe.scaling.factor": 4.0}, '
            '{"model.pe.scaling.type": "yarn", "model.pe.scaling.original_max_position": 9}, '
            '{"model.pe.logit_scaling": "log_n_scaling"}, {"model.pe.logit_scaling": "ssmax"}]')
    plan = load_sweep(write_sweep(tmp_path / "s.py", grid=grid))
    assert group_points(plan.points, list(range(6)), 12) == [[0, 1, 2, 3, 4], [5]]
    plain = plan.points[0].members[0].config
    assert first_difference(plain, plan.points[5].members[0].config) == "model.pe.logit_scaling"
    layered = {"seed": 0, "model": {"pe": {"type": "rope", "layers": ("rope", "none"),
                                           "scaling": {"type": "none"}}}}
    pi = {**layered, "model": {"pe": {**layered["model"]["pe"], "scaling": {"type": "pi"}}}}
    assert first_difference(layered, pi) == "model.pe.scaling.type"


def test_what_only_draws_the_initial_parameters_stacks_and_fires_threshold_too():
    def fire(**pe):
        return {"seed": 0, "model": {"pe": {"type": "fire", "init_c": 0.1,
                                            "init_threshold": 512.0, **pe}}}

    assert first_difference(fire(), fire(init_c=0.5, init_threshold=64.0)) is None
    assert program_key(fire()) == program_key(fire(init_c=0.5, init_threshold=64.0))
    assert first_difference(fire(), fire(mlp_width=16)) == "model.pe.mlp_width"
    layered = {"layers": ("fire", "none")}
    assert first_difference(fire(**layered), fire(init_threshold=64.0, **layered)) == \
        "model.pe.init_threshold"


def test_hope_sweeps_over_training_lengths_fires_eps_and_abacus_offsets_share_a_program(
        tmp_path):
    """HoPE's L follows the training length, which stacks: a sweep over both is one program
    with plain RoPE (L 0) in it; FIRE's eps stacks like its threshold, and Abacus's largest
    training offset like the randomized range."""
    grid = ('[{"data.train_lengths": (1, 8)}, '
            '{"data.train_lengths": (1, 8), "model.pe.hope_train_length": 8}, '
            '{"data.train_lengths": (1, 16), "model.pe.hope_train_length": 16}, '
            '{"model.pe.rotary_fraction": 0.5}]')
    plan = load_sweep(write_sweep(tmp_path / "s.py", grid=grid))
    assert group_points(plan.points, list(range(4)), 12) == [[0, 1, 2], [3]]
    fire = {"seed": 0, "model": {"pe": {"type": "fire", "eps": 1e-6}}}
    assert first_difference(fire, {**fire, "model": {"pe": {"type": "fire", "eps": 0.1}}}) \
        is None
    abacus = {"seed": 0, "model": {"pe": {"type": "none", "abacus": True, "abacus_max_k": 9}}}
    assert first_difference(abacus, {**abacus, "model": {"pe": {**abacus["model"]["pe"],
                                                                "abacus_max_k": 99}}}) is None
    assert first_difference(abacus, {**abacus, "model": {"pe": {**abacus["model"]["pe"],
                                                                "abacus_table_size": 64}}}) \
        == "model.pe.abacus_table_size"
