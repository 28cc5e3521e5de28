"""The benchmark scripts run end to end at tiny sizes and print their tables.

They run in this process, as ``python benchmarks/X.py`` would run them (``runtime.setup`` is
their only process-wide setting, and it only leaves the compilation cache as the suite set it),
which spares each one a Python and JAX start and shares the session's compiled programs.
"""

import os
import re
import shutil
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from conftest import REPO, run_script_here
from sweep_files import write_sweep

pytestmark = pytest.mark.slow  # each test runs a benchmark script end to end

def run_script(*args: str) -> str:
    done = run_script_here(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_data_throughput_covers_every_task():
    from pe_research.tasks.registry import GENERATED_TASKS

    out = run_script("benchmarks/data_throughput.py", "--batch-size", "8", "--lengths", "4",
                     "--seconds", "0.01")
    generated = list(GENERATED_TASKS)  # every task but those read from files
    rows = [line for line in out.splitlines() if line.startswith("|")]
    assert all(any(f"| {name} " in row for row in rows) for name in generated)


def test_data_throughput_times_a_sweep_programs_stacked_batches():
    out = run_script("benchmarks/data_throughput.py", "--sweep",
                     "configs/sweeps/randomized_pe_table_cpu.py", "--members", "1,3",
                     "--steps", "2")
    rows = [row.split("|")[1:4] for row in out.splitlines() if re.match(r"\| \d", row)]
    assert [int(members) for members, _, _ in rows] == [1, 3]
    batch = 32  # the CPU table's batch: examples/s is members x batch over the step's time
    for members, ms, rate in rows:  # ms printed to 0.01
        examples = int(members) * batch
        assert (examples / (float(ms) + 0.005) * 1e3 - 1 <= int(rate.replace(",", ""))
                <= examples / (float(ms) - 0.005) * 1e3 + 1)
    from pe_research.sweeps.spec import load_sweep

    # The same members' evaluation data: each member's examples of a length per length's time.
    out = run_script("benchmarks/data_throughput.py", "--sweep",
                     "configs/sweeps/randomized_pe_table_cpu.py", "--members", "1,3", "--eval")
    rows = [row.split("|")[1:5] for row in out.splitlines() if re.match(r"\| \d", row)]
    assert [int(members) for members, *_ in rows] == [1, 3]
    samples = load_sweep(REPO / "configs/sweeps/randomized_pe_table_cpu.py").points[0].members[
        0].config["data"]["eval_samples"]
    for members, frozen, ms, rate in rows:
        examples = int(members) * samples
        assert float(frozen) >= 0
        assert (examples / (float(ms) + 0.005) * 1e3 - 1 <= int(rate.replace(",", ""))
                <= examples / (float(ms) - 0.005) * 1e3 + 1)
    error = run_script_here("benchmarks/data_throughput.py", "--sweep",
                            "configs/sweeps/randomized_pe_table_cpu.py", "--members", "0")
    assert error.returncode == 2 and error.stderr.startswith("error: --members 0")


@pytest.mark.slow
def test_eval_speed_compares_bucket_and_length_compilation(trained_run_dir, tmp_path):
    # Any trained run will do: a copy of the shared one spares the script training its own.
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run_dir, run_dir)
    # Length 4 is below the run's own training and eval lengths, whose buckets must stay.
    out = run_script("benchmarks/eval_speed.py", "--run-dir", str(run_dir), "--max-length", "4",
                     "--repeats", "1")
    rows = {row.split("|")[1].strip().split(" (")[0]: row.split("|")[2:4]
            for row in out.splitlines() if row.startswith("| per ")}
    assert int(rows["per length"][0]) == 4  # one compile per length 1..4
    assert int(rows["per bucket"][0]) == 1  # (8, 16, 32): sources and targets of 1..4 fit 8
    assert "same exact-match numbers: True" in out
    assert float(out.split("cache speed-up: ")[1].split("x")[0]) > 0


def test_decode_speed_decodes_alike_in_one_loop_and_in_segments():
    out = run_script("benchmarks/decode_speed.py", "--schemes", "t5", "--shapes", "3x8,4x256",
                     "--batch-size", "2", "--repeats", "1", "--config.model.d_model=16",
                     "--config.model.num_heads=2", "--config.model.num_encoder_layers=1",
                     "--config.model.num_decoder_layers=1", "--config.model.d_ff=32")
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in out.splitlines()
            if line.startswith("| t5 ")]
    assert [row[2:4] for row in rows] == [["3 x 8", "one (8,)"], ["4 x 256", "one (256,)"],
                                          ["4 x 256", "segments (32, 64, 128, 256)"]]
    assert [row[-1] for row in rows] == ["-", "-", "True"]
    assert all(float(row[7].replace(",", "")) > 0 for row in rows)  # tokens/s


@pytest.mark.slow
def test_eval_memory_prints_a_row_per_compiled_shape():
    out = run_script("benchmarks/eval_memory.py", "--max-length", "8", "--batch-size", "8",
                     "--config.model.num_encoder_layers=1", "--config.model.num_decoder_layers=1")
    assert "compiled shapes: 1 (one per source bucket) instead of 2" in out
    rows = [line for line in out.splitlines() if line.startswith(("| 8 x", "| 16 x"))]
    assert [row.split(" | ")[:3] for row in rows] == [["| 16 x 24 x 32", "1-8", "8"]]


def test_train_speed_prints_a_row_per_steps_per_call_with_one_steps_flops():
    out = run_script("benchmarks/train_speed.py", "--shapes", "default", "--steps", "2",
                     "--steps-per-call", "1,4", "--config.model.d_model=16",
                     "--config.model.d_ff=32", "--config.data.batch_size=4")
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in out.splitlines()
            if line.startswith("| default ")]
    assert [row[:4] for row in rows] == [["default", "xla", "float32", "1"],
                                         ["default", "xla", "float32", "4"]]
    assert all(float(row[4].replace(",", "")) > 0 for row in rows)  # tokens/s
    # Both rows count one step's FLOPs: the 4-step program's loop body would be counted once.
    assert rows[0][9] == rows[1][9] and float(rows[0][9]) > 0


def test_the_language_model_shape_trains_full_windows_without_a_source():
    sys.path.insert(0, str(REPO / "benchmarks"))
    from train_speed import shape_config

    from pe_research import data
    from pe_research.tasks import get_task

    config = shape_config("language_model", "xla", "float32", ["--config.data.batch_size=2"])
    assert (config.model.architecture, config.model.d_model, config.model.num_decoder_layers,
            config.data.buckets) == ("decoder_only", 512, 12, (512,))
    task = get_task(config.task.to_dict(), config.data.to_dict())
    batch = data.train_batch(task, config.data, config.seed, 0)
    assert batch["source"].shape == (2, 0) and batch["target_input"].shape == (2, 512)
    assert batch["target_mask"].all()  # 511 characters and BOS: no padding


def test_train_speed_skips_a_step_that_needs_more_memory_than_the_device_has(monkeypatch):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import step_timing
    import train_speed

    config = train_speed.shape_config("default", "xla", "float32", [
        "--config.model.d_model=16", "--config.model.d_ff=32", "--config.data.batch_size=4"])
    monkeypatch.setattr(step_timing, "device_memory_bytes", lambda device: 2**10)  # 1 KiB
    with pytest.raises(MemoryError, match=r"^skipped: its step needs [\d.]+ GB, the device has "
                                          r"0\.0$"):
        train_speed.measure(config, steps=1, per_call=1)


def test_a_cudnn_row_without_its_xla_row_counts_the_xla_programs_flops():
    """``--implementations cudnn``: the FLOPs come from lowering the xla program alone, the
    count an xla row would have printed (a cuDNN call counts none)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import jax
    import train_speed
    from step_timing import compile_train_step

    overrides = ["--config.model.d_model=16", "--config.model.d_ff=32",
                 "--config.data.batch_size=4"]
    xla_row = compile_train_step(train_speed.shape_config("default", "xla", "float32", overrides))
    assert train_speed.xla_flops("default", "float32", overrides, 1) == xla_row.flops > 0
    assert train_speed.combinations(["bfloat16"], ["cudnn"]) == (
        [("cudnn", "bfloat16")] if jax.default_backend() == "gpu" else [])


def test_cpu_breakdown_times_the_step_in_a_process_of_its_own():
    out = run_script("benchmarks/cpu_breakdown.py", "--step-only", "2",
                     "--config.model.d_model=16", "--config.model.d_ff=32",
                     "--config.data.batch_size=4")
    assert out.splitlines()[-1] == out.split()[-1] and 0 < float(out.split()[-1]) < 10


def test_program_flops_count_matrix_products_from_their_formula():
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, str(REPO / "benchmarks"))
    from step_timing import matmul_flops, program_flops

    x, w1, w2 = jnp.ones((64, 48)), jnp.ones((48, 32)), jnp.ones((32, 16))
    lowered = jax.jit(lambda x, w1, w2: (x @ w1) @ w2).lower(x, w1, w2)
    assert program_flops(lowered) == 2 * 64 * 48 * 32 + 2 * 64 * 32 * 16
    # The fallback where a backend has no analysis of lowered programs (GPU plugins): a
    # function called twice counts twice, a batched einsum by its batch, a loop body once.
    inner = jax.jit(lambda h, w: jnp.tanh(h @ w))
    x, w = jnp.ones((2, 8, 16)), jnp.ones((16, 16))

    def program(x, w):
        h = inner(inner(x, w), w)
        h = jnp.einsum("btd,bsd->bts", h, h)
        return jax.lax.fori_loop(0, 5, lambda i, h: h @ jnp.ones((8, 8)), h)

    text = jax.jit(program).lower(x, w).as_text()
    assert matmul_flops(text) == 2 * (2 * 2 * 8 * 16 * 16) + 2 * 2 * 8 * 8 * 16 + 2 * 2 * 8 * 8 * 8


GPU_PROGRAM = """\
HloModule jit_train

%fused_copy.2 (p: bf16[8,4]) -> bf16[4,8] {
  %p = bf16[8,4]{1,0} parameter(0)
  ROOT %transpose.1 = bf16[4,8]{1,0} transpose(%p), dimensions={1,0}
}

ENTRY %main (a: bf16[8,4]) -> bf16[4,8] {
  %gemm_fusion_dot.3 = bf16[8,8]{1,0} fusion(%a, %a), kind=kCustom, calls=%gemm_computation.3, \
metadata={op_name="jit(train)/jvp(feed_forward)/dot_general"}
  %loop_add_fusion.7 = bf16[8,4]{1,0} fusion(%a), kind=kLoop, calls=%fused_add.7, \
metadata={op_name="jit(train)/transpose(jvp(layer_norm))/add"}
  %loop_copy_fusion.2 = bf16[4,8]{1,0} fusion(%a), kind=kLoop, calls=%fused_copy.2
  ROOT %command_buffer.1 = bf16[4,8]{1,0} call(%a), to_apply=%command_buffer_computation
}
"""


def gpu_trace(steps: int) -> dict:
    """A Perfetto trace as jax writes it on a GPU: kernels of a CUDA graph on one stream (XLA's
    named after their instruction, cuBLAS's and cuDNN's not), host events beside them."""
    meta = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
            {"ph": "M", "pid": 1, "tid": 14, "name": "thread_name",
             "args": {"name": "Stream #14(Compute)"}},
            {"ph": "M", "pid": 9, "name": "process_name", "args": {"name": "/host:CPU"}},
            {"ph": "M", "pid": 9, "tid": 3, "name": "thread_name", "args": {"name": "python"}}]
    kernels = [("gemm_fusion_dot_3", 0, 10), ("nvjet_sm90_tst_128x128", 10, 20),
               ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 30, 30),
               ("loop_add_fusion_7", 55, 10),  # overlaps the attention by 5 us
               ("loop_copy_fusion_2", 70, 4)]
    events = [{"ph": "X", "pid": 1, "tid": 14, "ts": 100 * step + start, "dur": duration,
               "name": name, "args": {"hlo_op": "command_buffer_1", "hlo_module": "jit_train"}}
              for step in range(steps) for name, start, duration in kernels]
    host = [{"ph": "X", "pid": 9, "tid": 3, "ts": 0, "dur": 500, "name": "PjitFunction(train)"}]
    return {"traceEvents": meta + events + host}


def test_step_profile_sums_a_gpu_trace_by_kind_pass_part_and_instruction():
    sys.path.insert(0, str(REPO / "benchmarks"))
    from step_profile import device_events, instructions, summarize

    summary = summarize(device_events(gpu_trace(steps=2)), instructions(GPU_PROGRAM), steps=2)
    assert summary["kind"] == {"matmul": 30, "attention": 30, "fusion": 10, "copy": 4}
    assert summary["busy"] == 74 - 5  # per step: the union of the intervals
    assert summary["pass"] == {"forward": 10, "backward": 10, "unknown": 54}
    assert summary["part"] == {"feed_forward": 10, "layer_norm": 10, "unknown": 54}
    ops = summary["op"]
    assert set(ops) == {"gemm_fusion_dot.3", "loop_add_fusion.7", "loop_copy_fusion.2",
                        "nvjet_sm90_tst_128x128",
                        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop"}
    assert ops["gemm_fusion_dot.3"] == {"us": 10, "launches": 1, "kind": "matmul",
                                        "kernel": "gemm_fusion_dot_3",
                                        "op_name": "jit(train)/jvp(feed_forward)/dot_general"}


def test_attention_kernels_prints_the_backends_maskings_and_products():
    out = run_script("benchmarks/attention_kernels.py", "--batch", "2", "--length", "8",
                     "--heads", "2", "--head-dim", "8")
    rows = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")]
    assert [row for row in rows if "mask" in row or "flag" in row or "lengths" in row] == [
        "XLA, dense mask, all true", "XLA, dense causal mask"]  # cuDNN rows on a GPU only
    assert "16 x 16 x 48" in rows and "16 x 64 x 16" in rows  # B T x d x 3d, x 4d x d
    assert float(out.split("over 16 x 16: ")[1].split(" us")[0]) > 0


def test_step_profile_attributes_a_cpu_ensemble_step_to_the_models_parts():
    out = run_script("benchmarks/step_profile.py", "--shape", "default", "--steps", "1",
                     "--members", "2", "--top", "200", "--config.model.d_model=16",
                     "--config.model.d_ff=32", "--config.data.batch_size=4")
    assert "2 members in one program" in out
    # the profiled program is the ensemble's: every model op sits under the members' vmap
    model_ops = [line for line in out.splitlines() if "jvp(feed_forward)" in line]
    assert model_ops and all("vmap(" in line for line in model_ops)
    tables: dict[str, dict[str, float]] = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) == 3 and cells[1] == "ms/step":
            table = tables.setdefault(cells[0], {})
        elif len(cells) == 3 and cells[1] != "---:":
            table[cells[0]] = float(cells[1])
    total = float(out.split("events sum ")[1].split(" ms")[0])
    for title in ("kind", "pass", "part"):  # each splits the same device time
        assert sum(tables[title].values()) == pytest.approx(total, abs=0.05), title
    # The model's named scopes reach the compiled program's op names.
    assert min(tables["part"][part] for part in ("attention", "feed_forward", "layer_norm")) > 0
    assert tables["pass"]["forward"] > 0 and tables["pass"]["backward"] > 0


def test_step_profile_refuses_a_step_the_device_cannot_hold(monkeypatch):
    """After the compile, before any step runs: one line naming the fix."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import step_profile
    import step_timing

    from pe_research.core.errors import UsageError

    monkeypatch.setattr(step_timing, "device_memory_bytes", lambda device: 0)
    monkeypatch.setattr(sys, "argv", [
        "step_profile.py", "--shape", "default", "--members", "2", "--config.model.d_model=16",
        "--config.model.d_ff=32", "--config.data.batch_size=4"])
    monkeypatch.setattr(step_profile, "profile", lambda *args: pytest.fail("a step ran"))
    with pytest.raises(UsageError, match=r"^its step needs [0-9.]+ GB, the device has 0\.0; "
                                         r"profile fewer --members or a smaller --shape$"):
        step_profile.main()


@pytest.mark.parametrize(("args", "message"), [
    (("train_speed.py", "--steps-per-call", "0"),
     "error: --steps-per-call 0: give positive integers, e.g. 1,10"),
    (("cpu_breakdown.py", "--step-only", "0"),
     "error: --step-only 0: give a positive number of steps per call"),
    (("train_speed.py", "--implementations", "flash"),
     "error: --implementations flash: choose from xla,cudnn"),
    (("ensemble_speed.py", "--members", "0"),
     "error: --members 0: give positive counts, e.g. 1,4,8"),
    (("sweep_throughput.py", "configs/sweeps/demo.py", "--members", "0"),
     "error: --members 0: give positive counts, e.g. 1,8,32"),
    (("sweep_throughput.py", "configs/sweeps/demo.py", "--coverage", "1.5"),
     "error: --coverage 1.5 --shape-samples 200: give a coverage in (0, 1] and at least one "),
    (("sweep_throughput.py", "configs/sweeps/demo.py", "--members-per-program", "0"),
     "error: --members-per-program='0' is invalid: a positive number of members, 'auto' "),
    (("sweep_throughput.py", "configs/sweeps/demo.py", "--point", "pe.type=nope"),
     "error: --point pe.type=nope: no such grid point; the sweep has 4, e.g. pe.type=none, "),
    (("ensemble_speed.py", "--config", "configs/randomized_pe_benchmark.py",
      "--steps-per-call", "10"),
     "error: train.steps_per_call=10 is invalid: needs training batches of one shape, but "
     "data.train_lengths pad to 3 shapes"),
    (("scheme_cost.py", "--schemes", "rope,nope"), "error: model.pe.type='nope' is invalid: "),
    (("bias_memory.py", "--length", "64", "--config.model.d_model=-1"),
     "error: model.d_model=-1 is invalid: "),
    (("step_profile.py", "--shape", "huge"), "error: --shape huge: not a shape; choose from "),
    (("step_profile.py", "--members", "-1"), "error: --members -1: give 0 (a single run) or "),
    (("attention_kernels.py", "--length", "0"), "error: --batch, --heads, --length and "),
    (("step_profile.py", "--read", "no.json.gz", "no.txt"), "error: no.json.gz: no such file"),
    (("decode_speed.py", "--shapes", "128x"), "error: --shapes '128x': give SOURCExTARGET "),
    (("decode_speed.py", "--schemes", "rope,nope"), "error: model.pe.type='nope' is invalid: "),
])
def test_bad_input_ends_a_benchmark_with_one_line_before_any_compile(args, message):
    script, *rest = args
    done = run_script_here(f"benchmarks/{script}", *rest)
    code, out, err = done.returncode, done.stdout, done.stderr
    assert code == 2
    assert err.startswith(message) and err.count("\n") == 1, err
    assert "|" not in out  # no table row was measured first


def test_run_all_names_the_choices_for_an_unknown_benchmark(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT_DIR": str(tmp_path / "out")}
    done = subprocess.run(["bash", "benchmarks/run_all.sh", "train_speed", "nope"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("error: no benchmark named 'nope'; choose from: cudnn_check ")
    assert not (tmp_path / "out").exists()  # checked before anything ran


def test_run_all_passes_a_benchmarks_own_arguments_stops_it_at_the_limit_and_bundles(tmp_path):
    out, bundle = tmp_path / "out", tmp_path / "tables.tgz"
    env = {**os.environ, "PYTHON": sys.executable, "OUT_DIR": str(out), "LIMIT_S": "30",
           "BUNDLE": str(bundle)}
    done = subprocess.run(["bash", "benchmarks/run_all.sh",
                           "data_throughput --lengths 3 --seconds 0.001"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "| task | family | n=3 |" in (out / "data_throughput.md").read_text()
    with tarfile.open(bundle) as archive:
        assert "./data_throughput.md" in archive.getnames()
    env["LIMIT_S"] = "3"  # the first cell alone takes 20 s: stopped, reported, no table
    done = subprocess.run(["bash", "benchmarks/run_all.sh", "data_throughput --seconds 20"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "== data_throughput: FAILED after" in done.stderr
    assert (out / "data_throughput.md.partial").exists()
    env["LIMIT_S"] = "2m"
    done = subprocess.run(["bash", "benchmarks/run_all.sh", "data_throughput"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == "error: LIMIT_S=2m: give whole seconds per benchmark (0: no limit)\n"


def test_the_gpu_session_names_its_stages_and_parts_when_given_others(tmp_path):
    for argv in ([], ["measure"]):
        done = subprocess.run(["bash", "benchmarks/gpu_session.sh", *argv], cwd=REPO,
                              env={**os.environ, "OUT": str(tmp_path / "out")},
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 2
        assert done.stderr == ("usage: bash benchmarks/gpu_session.sh wheels|speed|pilot "
                               "(see its first lines)\n")
    assert not (tmp_path / "out").exists()  # nothing installed, nothing written
    done = subprocess.run(["bash", "benchmarks/gpu_session.sh", "speed"], cwd=REPO,
                          env={**os.environ, "OUT": str(tmp_path / "out"),
                               "SPEED_PARTS": "large mfu"},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr == ("SPEED_PARTS: no part 'mfu'; choose from: first_program "
                           "costliest_program large ensemble length_stream every_shape "
                           "large_flags profiles first_program_bf16\n")
    assert not (tmp_path / "out").exists()


def table_rows(out: str, header: str) -> list[list[str]]:
    """The cells of the markdown table under the line starting with ``header``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_sweep_throughput_measures_each_member_count_and_projects_the_sweep(tmp_path):
    """Members drawn from the grid points that stack (two training-length ranges of RoPE,
    one of which has a task of another vocabulary)."""
    grid = ('[{"model.pe.type": "rope", "data.train_lengths": (1, 6)}, '
            '{"model.pe.type": "rope", "task.name": "copy"}, {"model.pe.type": "alibi"}]')
    sweep_file = write_sweep(tmp_path / "s.py", grid=grid, seeds="(0, 1)",
                             **{"train.steps": 30, "data.length_sampling": "per_batch",
                                "data.buckets": (4, 8, 16, 32)})
    out = run_script("benchmarks/sweep_throughput.py", str(sweep_file), "--members", "1,4",
                     "--steps", "2", "--stack", "points", "--every-shape", "--coverage", "0.5",
                     "--shape-samples", "30")
    assert ("3 grid points, 6 runs of 30 steps; measured point pe.type=rope,train_lengths=1-6"
            " (2 members); members from the 2 grid points that stack with it (2 tasks)") in out
    measured = table_rows(out, "| members per program")
    assert [row[0] for row in measured] == ["1", "2", "4"]  # the point's own 2 members added
    rate = {int(row[0]): float(row[4].replace(",", "")) for row in measured}
    for members, row in rate.items():  # members over the loop's time per step
        step_ms, data_ms, loop_ms = (float(cell) for cell in next(
            r[1:4] for r in measured if r[0] == str(members)))
        assert step_ms > 0 and data_ms > 0 and loop_ms > 0
        assert row == pytest.approx(members / loop_ms * 1e3, rel=0.02)
    best = max(rate, key=rate.get)
    training_only = table_rows(out, "| grouping | programs | training |")
    projected = table_rows(out, "| grouping | programs | training | evaluation")[:3]
    assert [row[:3] for row in training_only] == [row[:3] for row in projected]
    assert [row[0] for row in projected] == [
        "one program per run", "one per grid point (pe-research sweep)",
        f"--members-per-program {best}"]
    # Grouped: the two RoPE points share a program once it holds their 4 members, never ALiBi.
    assert [row[1] for row in projected] == ["6", "3", "2" if best == 4 else "3"]
    stacked = (4 * 30 / rate[4] + 2 * 30 / rate[2]) if best == 4 else 6 * 30 / rate[2]
    # Evaluation: run by run for one program per run, else the report's programs: the two
    # RoPE points' 4 runs together, ALiBi's 2 apart.
    alone, together = (float(value) for value in re.search(
        r"one member ([0-9.]+) s; the report's 2 programs, the first of 4 runs \(2 tasks\) "
        r"([0-9.]+) s", out).groups())
    for row, seconds, evaluated in zip(
            projected, (6 * 30 / rate[1], 6 * 30 / rate[2], stacked),
            (6 * alone, 2 * together, 2 * together), strict=True):
        training, evaluation, total = (float(cell) for cell in row[2:])
        assert training == pytest.approx(seconds / 3600, rel=0.02)
        assert evaluation == pytest.approx(evaluated / 3600, rel=0.05, abs=1e-4)
        assert total == pytest.approx(training + evaluation, rel=0.02)
    # Every program's own shapes: the sweep's 3 programs (one per grid point, as its file asks)
    # of two models; at coverage 0.5 each model's covering shape alone is timed, and every step
    # of a model's programs takes its time: 30 steps of each program. The compiles come on top.
    assert "3 programs" in out and "2 timed" in out and "at the narrowest timed shape" in out
    classes = table_rows(out, "| model | members | source x target x joint width")
    assert [row[:3] for row in classes] == [["1", "2", "8 x 16 x 24"], ["2", "2", "8 x 16 x 24"]]
    loop_ms = {row[0]: float(row[4]) for row in classes}
    steps_h, compiles_h = (float(value) for value in re.search(
        r"every program at its own shapes: ([0-9.e-]+) h of steps \+ ([0-9.e-]+) h of compiles",
        out).groups())
    assert steps_h == pytest.approx(30 * (2 * loop_ms["1"] + loop_ms["2"]) / 1e3 / 3600,
                                    rel=0.02)
    assert compiles_h >= sum(float(row[5]) for row in classes) / 3600 * 0.99
    # Evaluations during training (every 20 of 30 steps: 2 a run), member by member: each
    # model's first program timed (RoPE's two programs at its cost, ALiBi's its own).
    measured = {int(model): (float(first), float(again)) for model, first, again in re.findall(
        r"evaluation during training \(2 a run, member by member as the loop runs it\), model "
        r"(\d)'s first program of 2 members: ([0-9.]+) s the first time \(compiles\), "
        r"([0-9.]+) s after", out)}
    assert sorted(measured) == [1, 2]
    assert all(first > again >= 0 for first, again in measured.values())  # the first compiles
    evaluating_h = float(re.search(r"evaluation during training, every program at its model's "
                                   r"cost a member: ([0-9.e-]+) h", out).group(1))
    rope, alibi = measured[1], measured[2]
    assert evaluating_h == pytest.approx((2 * (2 * rope[1] + rope[0] - rope[1])
                                          + 2 * alibi[1] + alibi[0] - alibi[1]) / 3600,
                                         rel=0.05, abs=2e-6)
    every = table_rows(out, "| grouping | programs | training | evaluation")[-1]
    assert every[:2] == ["one per grid point, every program's own shapes", "3"]
    assert float(every[2]) == pytest.approx(steps_h + compiles_h + evaluating_h, rel=0.02)


def test_every_shape_projection_times_the_heaviest_shapes_and_bounds_the_rest():
    """Golden figures: three programs of two models; each model's covering shape is always
    timed, heavier shapes next; an untimed shape takes the narrowest timed one that holds it;
    each program pays its steps at each shape and one compile per shape it draws."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from sweep_projection import (
        Program,
        StepClass,
        chosen_classes,
        class_weights,
        padded_tokens,
        projected_training,
        timed_as,
    )

    def program(architecture: str, members: int, shares: dict) -> Program:
        configs = [{"train": {"steps": 100}, "model": {"architecture": architecture}, "seed": k}
                   for k in range(members)]
        return Program(configs, shares, {widths: [0] for widths in shares})

    # (source, target, joint) widths; model b is a single-stack model, a an encoder-decoder
    programs = [program("encoder_decoder", 2, {(8, 16, 24): 0.5, (16, 16, 32): 0.5}),
                program("encoder_decoder", 2, {(16, 32, 48): 1.0}),
                program("encoder_only", 3, {(8, 8, 8): 1.0})]
    a, b = programs[0].key, programs[2].key
    assert a == programs[1].key != b
    weights = class_weights(programs)
    assert weights == pytest.approx({StepClass(a, 2, (8, 16, 24)): 1 / 6,
                                     StepClass(a, 2, (16, 16, 32)): 1 / 6,
                                     StepClass(a, 2, (16, 32, 48)): 1 / 3,
                                     StepClass(b, 3, (8, 8, 8)): 1 / 3})
    covers = [StepClass(a, 2, (16, 32, 48)), StepClass(b, 3, (8, 8, 8))]
    assert chosen_classes(weights, 0.5) == covers  # 2/3 of the steps already
    timed = chosen_classes(weights, 0.8)
    assert timed == [*covers, StepClass(a, 2, (8, 16, 24))]
    assert timed_as(StepClass(a, 2, (16, 16, 32)), timed) == StepClass(a, 2, (16, 32, 48))
    assert timed_as(StepClass(a, 2, (8, 8, 16)), timed) == StepClass(a, 2, (8, 16, 24))
    assert timed_as(StepClass(a, 2, (8, 16, 32)), timed) == StepClass(a, 2, (16, 32, 48))
    loop_s = dict(zip(timed, (0.03, 0.01, 0.02), strict=True))
    compile_s = dict(zip(timed, (2.0, 1.0, 1.5), strict=True))
    training, compiling = projected_training(programs, loop_s, compile_s)
    assert training == pytest.approx(100 * (0.5 * 0.02 + 0.5 * 0.03) + 100 * 0.03 + 100 * 0.01)
    assert compiling == pytest.approx((1.5 + 2.0) + 2.0 + 1.0)
    from sweep_projection import evaluations_per_run
    assert [evaluations_per_run({"steps": steps, "eval_every": every})
            for steps, every in ((30, 20), (100, 50), (100, 0), (5, 10))] == [2, 2, 0, 1]
    # A member's row: 24 and 32 tokens (source + target) half the time each, 48, and the joint
    # width 8 of the third program's three members, over 200 + 200 + 300 member-steps.
    assert padded_tokens(programs) == pytest.approx((200 * 28 + 200 * 48 + 300 * 8) / 700)


def test_shapes_only_lists_every_programs_shapes_without_timing(tmp_path):
    """``--shapes-only``: the grouping asked for, each class's share of the steps (summing to
    one), the padded tokens; no step compiled, no timing column."""
    grid = '[{"model.pe.type": "rope"}, {"model.pe.type": "rope", "task.name": "copy"}]'
    sweep_file = write_sweep(tmp_path / "s.py", grid=grid, seeds="(0, 1)",
                             **{"train.steps": 30, "data.length_sampling": "per_batch",
                                "data.buckets": (4, 8, 16, 32)})
    out = run_script("benchmarks/sweep_throughput.py", str(sweep_file), "--shapes-only",
                     "--members-per-program", "4", "--shape-samples", "30")
    assert "(up to 4 members per program, every program's own shapes): 1 programs" in out
    rows = table_rows(out, "| model | members | source x target x joint width | share of steps |")
    assert len(rows[0]) == 4 and {row[:2] for row in map(tuple, rows)} == {("1", "4")}
    assert sum(float(row[3].rstrip("%")) for row in rows) == pytest.approx(100, abs=0.3)
    tokens = float(re.search(r"pays ([0-9.]+) tokens a step", out).group(1))
    assert tokens == pytest.approx(sum(  # an encoder-decoder's: source + target
        float(row[3].rstrip("%")) / 100 * sum(int(w) for w in row[2].split(" x ")[:2])
        for row in rows), abs=0.3)
    assert "ms/step" not in out


def test_program_shapes_count_the_widest_members_widths_at_sampled_steps():
    """Members of two tasks drawing their own lengths: each sampled step's shape is the widest
    member's widths (as the trainer stacks their batches), with each run's length stream and
    with a shared one; the shares sum to one."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from sweep_projection import program_shapes, sampled_steps

    from pe_research import data
    from pe_research.config import load_config
    from pe_research.tasks import get_task

    assert sampled_steps(10, 20) == list(range(10))
    assert sampled_steps(1000, 4) == [0, 250, 500, 750]
    configs = []
    for k, task in enumerate(("reverse_string", "duplicate_string", "reverse_string")):
        config = load_config(REPO / "configs/default.py", [
            f"--config.task.name={task}", "--config.data.length_sampling=per_batch",
            "--config.data.train_lengths=(1, 12)", "--config.data.buckets=(4, 8, 16, 32, 64, 128)",
            "--config.train.steps=300", "--config.eval.lengths=(4, 8, 16)",
            "--config.train.eval_lengths=(16,)"]).to_dict()
        config["seed"] = k
        configs.append(config)
    for stream in ("seed", "shared"):
        for config in configs:
            config["data"]["length_stream"] = stream
        program = program_shapes(configs, 50)
        assert sum(program.shares.values()) == pytest.approx(1.0)
        assert sum(len(steps) for steps in program.steps_at.values()) == 50
        tasks = [get_task(c["task"], c["data"]) for c in configs]
        for widths, steps in program.steps_at.items():
            for step in steps[:3]:
                batch = data.stack_batches([data.train_batch(task, c["data"], c["seed"], step)
                                            for task, c in zip(tasks, configs, strict=True)])
                assert (batch["source"].shape[2], batch["target_input"].shape[2],
                        batch["joint_mask"].shape[2]) == widths
        assert len(program.shares) >= 3


def test_sweep_throughput_skips_the_member_counts_the_device_cannot_hold(tmp_path, monkeypatch):
    """A count whose compiled step needs more memory than the device has is not run, nor any
    larger one; the projection goes on from the counts that fit."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import step_timing
    import sweep_throughput

    from pe_research.sweeps.spec import load_sweep

    sweep_file = write_sweep(tmp_path / "s.py", grid='[{"model.pe.type": "rope"}]',
                             seeds="(0, 1)", **{"train.steps": 30})
    plan = load_sweep(sweep_file)
    needed = {members: step_timing.step_seconds(sweep_throughput.member_configs(
        plan, plan.points[0], members, "seeds"), 1)[3] for members in (2, 4)}
    assert 0 < needed[2] < needed[4]
    limit_gb = (needed[2] + needed[4]) / 2
    monkeypatch.setattr(step_timing, "device_memory_bytes", lambda device: limit_gb * 2**30)
    out = run_script("benchmarks/sweep_throughput.py", str(sweep_file), "--members", "1,4,8",
                     "--steps", "2")
    rows = table_rows(out, "| members per program")
    assert [row[0] for row in rows] == ["1", "2", "4", "8"]
    assert 0 < float(rows[0][6]) < float(rows[1][6]) == float(f"{needed[2]:.3g}")
    assert rows[2][1] == (f"skipped: its step needs {needed[4]:.1f} GB, the device has "
                          f"{limit_gb:.1f}")
    assert rows[3][1] == "skipped: more members than 4"
    projected = table_rows(out, "| grouping | programs | training | evaluation")
    assert [row[:2] for row in projected] == [["one program per run", "2"],
                                              ["one per grid point (pe-research sweep)", "1"],
                                              ["--members-per-program " + max(
                                                  ("1", "2"), key=lambda m: float(next(
                                                      r[4] for r in rows if r[0] == m))), "1"]]


def test_members_of_stacked_points_start_at_the_measured_point(tmp_path):
    """``--stack points --point P`` measures the program that holds P: P's members first, then
    the points after it that stack (in the grouping's order), wrapping round to the first."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from sweep_throughput import member_configs

    from pe_research.sweeps.spec import load_sweep

    grid = ('[{"task.name": "copy"}, {"model.pe.type": "alibi"}, '
            '{"task.name": "reverse_string"}, {"task.name": "bucket_sort"}]')
    plan = load_sweep(write_sweep(tmp_path / "s.py", grid=grid, seeds="(0, 1)"))
    configs = member_configs(plan, plan.points[2], 7, "points")
    assert [(c.task.name, c.seed) for c in configs] == [
        ("reverse_string", 0), ("reverse_string", 1), ("bucket_sort", 0), ("bucket_sort", 1),
        ("copy", 0), ("copy", 1), ("reverse_string", 1_000)]  # ALiBi never: another program
    # the grouping's order, narrowest training batch first: joint widths 128, 48, 88, 48
    grid = ('product({"task.name": ["duplicate_string", "even_pairs", "reverse_string", '
            '"parity_check"]})')
    plan = load_sweep(write_sweep(tmp_path / "w.py", grid=grid, seeds="(0, 1)",
                                  **{"data.train_lengths": "(1, 40)",
                                     "data.buckets": "(16, 32, 64)"}))
    assert [(c.task.name, c.seed) for c in member_configs(plan, plan.points[1], 5, "points")] \
        == [("even_pairs", 0), ("even_pairs", 1), ("parity_check", 0), ("parity_check", 1),
            ("reverse_string", 0)]


def test_a_step_is_timed_at_the_widest_of_its_batches_shapes(tmp_path):
    """One member whose batches fall in several length buckets (one length per batch): every
    timed call has the widest batch's shape, so one compiled program runs them all."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import numpy as np
    from step_timing import step_seconds, widest_calls
    from sweep_throughput import member_configs

    from pe_research.sweeps.spec import load_sweep

    def call(width: int) -> list[dict]:
        return [{"source": np.zeros((1, 2, width), np.int32), "mask": np.ones((1, 2, width))}]

    calls = [call(16), call(64), call(32), call(64)]
    assert widest_calls(calls) == [calls[1], calls[3]]
    sweep_file = write_sweep(tmp_path / "s.py", grid='[{"model.pe.type": "rope"}]',
                             seeds="(0,)", **{"data.length_sampling": "per_batch",
                                              "data.train_lengths": (1, 12),
                                              "data.buckets": (4, 8, 16, 32)})
    plan = load_sweep(sweep_file)
    compile_s, step_s, loop_s, _ = step_seconds(
        member_configs(plan, plan.points[0], 1, "seeds"), 2)
    assert compile_s > 0 and step_s > 0 and loop_s > 0


@pytest.mark.slow
def test_ensemble_speed_prints_one_row_per_member_count():
    out = run_script("benchmarks/ensemble_speed.py", "--members", "1,2", "--steps", "2",
                     "--steps-per-call", "2", "--draw-workers", "1", "--config.model.d_model=16",
                     "--config.model.d_ff=32", "--config.data.batch_size=8",
                     "--config.model.num_encoder_layers=1", "--config.model.num_decoder_layers=1")
    assert "2 timed steps x 3 blocks, 2 per call" in out  # both programs run two steps per call
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in out.splitlines()
            if line.startswith("| ") and "members" not in line]
    assert [row[0] for row in rows] == ["1", "2"]
    single = float(out.split("single run: ")[1].split(" ms/step")[0])
    for (members, ms, one_by_one, ratio, per_member, _, host, loop, *_, host_ahead,
         loop_ahead) in rows:
        assert float(one_by_one) == pytest.approx(int(members) * single, abs=0.1 * int(members))
        assert float(ratio.rstrip("x")) == pytest.approx(float(one_by_one) / float(ms), rel=0.1)
        assert int(per_member.replace(",", "")) == pytest.approx(8 / float(ms) * 1e3, rel=0.1)
        assert float(host) > 0 and float(loop) > 0  # the host's batches; the step with them
        assert float(host_ahead) > 0 and float(loop_ahead) > 0  # the same, drawn by a process


def test_batches_drawn_by_processes_are_the_programs_own(tmp_path):
    """``WorkerDrawer``'s batches, steps asked out of order and again, equal ``batch_drawer``'s:
    two members of two tasks, one with position IDs."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import ml_collections
    from step_timing import WorkerDrawer, batch_drawer, seed_members

    from pe_research.config import load_config
    from pe_research.tasks import default_task_config

    configs = seed_members(load_config(REPO / "configs/default.py"), 2)
    configs[1].task = ml_collections.ConfigDict(default_task_config("addition"))
    configs[1].data.train_lengths = (1, 6)
    expected, workers = batch_drawer(configs), WorkerDrawer(configs, 2)
    try:
        for step in (0, 3, 1, 3, 0):
            got, want = workers(step), expected(step)
            assert sorted(got) == sorted(want) and "source_abacus" in got
            for key, value in want.items():
                np.testing.assert_array_equal(got[key], value, err_msg=key)
    finally:
        workers.close()


def test_scheme_costs_default_schemes_are_those_the_task_supplies_the_ids_of():
    sys.path.insert(0, str(REPO / "benchmarks"))
    from scheme_cost import schemes_for

    from pe_research.positional import SCHEMES

    # copy supplies no position IDs, so position coupling (which reads "coupled" IDs) is left
    # out of the default list; addition supplies them, so its list is every scheme
    assert schemes_for("copy") == [name for name in SCHEMES if name != "position_coupling"]
    assert schemes_for("addition") == list(SCHEMES)


@pytest.mark.slow
def test_scheme_cost_flags_the_schemes_that_build_per_pair_vectors():
    out = run_script("benchmarks/scheme_cost.py", "--lengths", "16", "--steps", "1",
                     "--batch-size", "2", "--schemes", "fire,shaw,dynamic_bias")
    rows = {row.split("|")[1].strip(): row for row in out.splitlines() if row.startswith("| ")
            and "scheme" not in row}
    assert list(rows) == ["none", "fire", "shaw", "dynamic_bias"]  # NoPE first: the reference
    assert "1.00x" in rows["none"]
    # Once for the batch (its positions are shared), still wider than the bias [2, 4, 16, 16]:
    assert "[1, 16, 16, 32]" in rows["fire"]  # FIRE's MLP: 32 hidden units per pair
    assert "[1, 16, 16, 16]" in rows["dynamic_bias"]  # d_model / 4 hidden units per pair
    assert rows["shaw"].rstrip(" |").endswith("-")  # its value term runs one table row at a time
    paths = {name: row.split("|")[2].strip() for name, row in rows.items()}
    assert paths == {"none": "fused", "fire": "fused", "shaw": "explicit",
                     "dynamic_bias": "fused"}  # shaw's value vectors need the weights
