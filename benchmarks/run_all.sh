#!/usr/bin/env bash
# Every benchmark's table on this machine, each saved under OUT_DIR as soon as it is done.
#
#   bash benchmarks/run_all.sh                      # all of them, into runs/benchmarks/
#   OUT_DIR=/tmp/bench bash benchmarks/run_all.sh train_speed ensemble_speed
#   LIMIT_S=120 BUNDLE=/tmp/bench.tgz bash benchmarks/run_all.sh \
#       "train_speed --shapes large --dtypes bfloat16" "ensemble_speed --members 1,32"
#
# A name may carry arguments of its own (quoted with it), added after its default ones.
# LIMIT_S stops each benchmark after that many seconds (it counts as failed; what it printed
# stays in NAME.md.partial); BUNDLE writes OUT_DIR as one .tgz after each benchmark, for
# machines that hand back few files.
# Made for a GPU: there the scripts add their cuDNN and bfloat16 rows themselves, scheme_cost
# runs a second time with cuDNN attention in bfloat16, and cudnn_check, first, runs
# tests/test_cudnn_gpu.py (cuDNN against xla, outputs and gradients; skipped on a CPU). On a
# CPU the `large` train shape alone takes about an hour (benchmarks/RESULTS.md); run the
# scripts one by one there.
# PYTHON picks the interpreter (default .venv/bin/python, else python3). A benchmark that fails
# is reported and the rest still run; the exit status says whether any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT_DIR:-runs/benchmarks}
PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # pe_research without an install, too
export PYTHONUNBUFFERED=1  # rows appear as they are measured
ALL=(cudnn_check train_speed step_profile attention_kernels ensemble_speed sweep_throughput
     bias_memory scheme_cost scheme_cost_cudnn eval_memory eval_speed decode_speed data_throughput torch_reference)
LIMIT_S=${LIMIT_S:-0}
NAMES=("$@")
[ ${#NAMES[@]} -eq 0 ] && NAMES=("${ALL[@]}")

command_of() {  # the benchmark's command line, by name
  case "$1" in
    scheme_cost_cudnn)
      echo "benchmarks/scheme_cost.py --config.model.attention_implementation=cudnn" \
           "--config.model.dtype=bfloat16" ;;
    cudnn_check)
      echo "-m pytest tests/test_cudnn_gpu.py -q -p no:cacheprovider" ;;
    step_profile)
      echo "benchmarks/step_profile.py --shape large --implementation cudnn --dtype bfloat16" ;;
    sweep_throughput)  # the papers' table at its own shape
      echo "benchmarks/sweep_throughput.py configs/sweeps/randomized_pe_table.py" \
           "--members 1,8,32,128" ;;
    torch_reference)  # PyTorch and x-transformers where they are installed
      echo "benchmarks/torch_reference.py --shapes large --dtype bfloat16 --compile" ;;
    train_speed | attention_kernels | ensemble_speed | bias_memory | scheme_cost | eval_memory \
      | eval_speed | decode_speed | data_throughput | cpu_breakdown)
      echo "benchmarks/$1.py" ;;
    *) return 1 ;;
  esac
}

for entry in "${NAMES[@]}"; do
  name=${entry%% *}
  if ! command_of "$name" >/dev/null; then
    echo "error: no benchmark named '$name'; choose from: ${ALL[*]} cpu_breakdown" >&2
    exit 2
  fi
done
if ! [[ $LIMIT_S =~ ^[0-9]+$ ]]; then
  echo "error: LIMIT_S=$LIMIT_S: give whole seconds per benchmark (0: no limit)" >&2
  exit 2
fi

mkdir -p "$OUT_DIR"
describe='import jax; d = jax.devices()[0]
print(f"{d.device_kind} x{jax.device_count()} ({jax.default_backend()}), jax {jax.__version__}")'
"$PYTHON" -c "$describe" >"$OUT_DIR/device.txt" || exit 1
echo "device: $(cat "$OUT_DIR/device.txt"); tables go to $OUT_DIR/"
failed=()
bundle() { [ -z "${BUNDLE:-}" ] || tar czf "$BUNDLE" -C "$OUT_DIR" . ; }
for entry in "${NAMES[@]}"; do
  name=${entry%% *}
  read -r -a command <<<"$(command_of "$name") ${entry#"$name"}"
  echo "== $name: $PYTHON ${command[*]}"
  start=$SECONDS
  limit=()
  [ "$LIMIT_S" -gt 0 ] && limit=(timeout -k 10 "$LIMIT_S")
  # A table lands under its final name only when its script finished, so a partial one is never
  # mistaken for a result.
  if "${limit[@]}" "$PYTHON" "${command[@]}" 2>"$OUT_DIR/$name.log" \
      | tee "$OUT_DIR/$name.md.partial"; then
    mv "$OUT_DIR/$name.md.partial" "$OUT_DIR/$name.md"
    echo "== $name: done in $((SECONDS - start)) s"
  else
    failed+=("$name")
    echo "== $name: FAILED after $((SECONDS - start)) s; see $OUT_DIR/$name.log" >&2
  fi
  bundle
done
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}" >&2; exit 1; }
