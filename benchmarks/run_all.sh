#!/usr/bin/env bash
# Every benchmark's table on this machine, each saved under OUT_DIR as soon as it is done.
#
#   bash benchmarks/run_all.sh                      # all of them, into runs/benchmarks/
#   OUT_DIR=/tmp/bench bash benchmarks/run_all.sh train_speed ensemble_speed
#
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
ALL=(cudnn_check train_speed step_profile attention_kernels ensemble_speed bias_memory scheme_cost
     scheme_cost_cudnn eval_memory eval_speed decode_speed data_throughput)
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
    train_speed | attention_kernels | ensemble_speed | bias_memory | scheme_cost | eval_memory \
      | eval_speed | decode_speed | data_throughput | cpu_breakdown)
      echo "benchmarks/$1.py" ;;
    *) return 1 ;;
  esac
}

for name in "${NAMES[@]}"; do
  if ! command_of "$name" >/dev/null; then
    echo "error: no benchmark named '$name'; choose from: ${ALL[*]} cpu_breakdown" >&2
    exit 2
  fi
done

mkdir -p "$OUT_DIR"
describe='import jax; d = jax.devices()[0]
print(f"{d.device_kind} x{jax.device_count()} ({jax.default_backend()}), jax {jax.__version__}")'
"$PYTHON" -c "$describe" >"$OUT_DIR/device.txt" || exit 1
echo "device: $(cat "$OUT_DIR/device.txt"); tables go to $OUT_DIR/"
failed=()
for name in "${NAMES[@]}"; do
  read -r -a command <<<"$(command_of "$name")"
  echo "== $name: $PYTHON ${command[*]}"
  start=$SECONDS
  # A table lands under its final name only when its script finished, so a partial one is never
  # mistaken for a result.
  if "$PYTHON" "${command[@]}" 2>"$OUT_DIR/$name.log" | tee "$OUT_DIR/$name.md.partial"; then
    mv "$OUT_DIR/$name.md.partial" "$OUT_DIR/$name.md"
    echo "== $name: done in $((SECONDS - start)) s"
  else
    failed+=("$name")
    echo "== $name: FAILED after $((SECONDS - start)) s; see $OUT_DIR/$name.log" >&2
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}" >&2; exit 1; }
