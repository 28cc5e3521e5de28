#!/usr/bin/env bash
# The accelerator checks of a short GPU lease, prepared here so that the lease goes to measuring.
#
#   bash benchmarks/gpu_session.sh wheels   # here, once: .whl/ gets what a bare GPU image lacks
#   bash benchmarks/gpu_session.sh speed    # there, .whl carried: at most 5 min 50 s
#   bash benchmarks/gpu_session.sh pilot    # there, .whl carried: at most 5 minutes
#
# speed, each benchmark under its own time limit, each table saved as soon as it is done:
#   first_program: the sweep throughput of configs/sweeps/randomized_pe_table.py at its own
#   shape, members of its first tasks as the sweep stacks them (THROUGHPUT_MEMBERS, default 1, 8,
#   32, 128; a count the device cannot hold skipped after its compile, with its memory in the
#   row), the projected device-hours of the whole table's training, then its evaluation as the
#   report runs it (the grid points that share a model, up to 32 runs a program) and the total
#   (THROUGHPUT_S); large: the `large` shape's train step in bfloat16 with cuDNN attention (its
#   MFU); ensemble: 1 against 32 ensemble members, their batches also drawn ahead by
#   DRAW_WORKERS processes (default 4; SPEED_S each). SPEED_PARTS picks parts, in
#   order (default: first_program large ensemble); costliest_program, the table's program as if
#   every one cost what its costliest does (duplicate_string, the longest sequences, on
#   Transformer-XL; 30 members; THROUGHPUT_S), and length_stream, the pilot's 6 runs trained
#   STREAM_STEPS steps (default 1000; no evaluation) with each run's own lengths and then with
#   data.length_stream=shared, the trainer's steps/s and wall time of each (STREAM_S each), and
#   every_shape, the table's training projected from every program's own step shapes (programs
#   of 30 members as the sweep groups them on a GPU, the shapes of COVERAGE of the steps timed,
#   default 0.8: about 16 compiles) with its evaluations during training (a compile and two
#   passes for each of the 6 models; EVERY_SHAPE_EXTRA adds arguments, e.g.
#   --config.data.length_stream=shared; give THROUGHPUT_S about 480: the training projection
#   prints before the evaluations are timed), and large_flags, the `large` part again under each
#   set of XLA flags in LARGE_XLA_FLAGS (';'-separated; default: Triton GEMMs that take in their
#   element-wise neighbours, then cuBLASLt's bias and GELU epilogues; SPEED_S each), and
#   profiles, where three float32 steps spend their device time (step_profile.py: by kind of
#   kernel, pass, part of the model, top instructions; PROFILES below; SPEED_S each), and
#   first_program_bf16, first_program in bfloat16 with cuDNN attention (THROUGHPUT_S), run only
#   when named.
# pilot: configs/sweeps/randomized_pe_pilot.py, one cell of that table (plain and randomized,
#   3 seeds, one program) for PILOT_STEPS of the table's 100,000 steps, evaluated at every
#   length 1-500, then its table in the paper's metric (PILOT_S in all). On an H200 its 6
#   members trained about 80 steps/s (4,000 steps in 2 min 26 s, the compile and an evaluation
#   at lengths 100 and 500 included); the report's evaluation at 500 lengths took longer than
#   the 70 s left it, so give PILOT_S about 3 minutes beyond the training's.
# OUT (default runs/gpu_session) gets speed_*.tgz (tables, logs, the device's name),
# pilot.tgz.part* (the pilot's run directories without their frozen eval sets, in pieces of
# 15 MiB) and session.log. EXTRA_PILOT adds config overrides to the pilot and to length_stream (a CPU trial
# at a smaller size, say). Two stages in two calls: a lease that ends early keeps the first's results.
set -uo pipefail
cd "$(dirname "$0")/.."
MISSING=(ml_collections datasets dill multiprocess submitit)  # not in the GPU image
STAGE=${1:-}

if [ "$STAGE" = wheels ]; then
  exec python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    -c constraints.txt -d .whl "${MISSING[@]}"
fi
if [ "$STAGE" != speed ] && [ "$STAGE" != pilot ]; then
  echo "usage: bash benchmarks/gpu_session.sh wheels|speed|pilot (see its first lines)" >&2
  exit 2
fi
ALL_PARTS="first_program costliest_program large ensemble length_stream every_shape"
ALL_PARTS+=" large_flags profiles first_program_bf16"
SPEED_PARTS=${SPEED_PARTS:-first_program large ensemble}
for part in $SPEED_PARTS; do
  if [[ " $ALL_PARTS " != *" $part "* ]]; then
    echo "SPEED_PARTS: no part '$part'; choose from: $ALL_PARTS" >&2
    exit 2
  fi
done
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi

OUT=${OUT:-runs/gpu_session}
PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
PILOT_STEPS=${PILOT_STEPS:-10000}
THROUGHPUT_S=${THROUGHPUT_S:-220} SPEED_S=${SPEED_S:-60} PILOT_S=${PILOT_S:-300}
THROUGHPUT_MEMBERS=${THROUGHPUT_MEMBERS:-1,8,32,128}
STREAM_STEPS=${STREAM_STEPS:-1000} STREAM_S=${STREAM_S:-120}
LARGE="train_speed --shapes large --dtypes bfloat16 --implementations cudnn --steps-per-call 1"
LARGE_XLA_FLAGS=${LARGE_XLA_FLAGS:-"--xla_gpu_enable_triton_gemm=true \
--xla_gpu_triton_gemm_any=true;--xla_gpu_enable_cublaslt=true"}
# Where a float32 step's device time goes: the default config's 32 members (the step ratio's
# goal), the table's first program (even_pairs on NoPE) at 32 and its costliest (duplicate_string
# on Transformer-XL) at 30, the table's model at its training length 40.
TABLE_MODEL="--config.train.predict_eos=False --config.model.pe.randomize.per=batch"
PROFILES=("--shape default --members 32"
  "--shape randomized_pe --members 32 --config.task.name=even_pairs --config.model.pe.type=none \
--config.model.pe.randomize.max_position=0 $TABLE_MODEL"
  "--shape randomized_pe --members 30 $TABLE_MODEL")
WORK=${WORK:-/tmp/gpu_session}  # kept between calls to a warm machine
export PYTHON PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
failed=0

streams() {  # the pilot's program trained on each length stream; speed_length_stream.tgz
  local dir="$WORK/speed/length_stream" stream
  mkdir -p "$dir"
  for stream in seed shared; do
    echo "== length_stream=$stream: $STREAM_STEPS steps, limit $STREAM_S s"
    local start=$SECONDS
    # shellcheck disable=SC2086  # EXTRA_PILOT holds several overrides
    timeout -k 10 "$STREAM_S" "$PYTHON" -m pe_research.cli sweep \
      configs/sweeps/randomized_pe_pilot.py --workdir "$dir/$stream" --no-report \
      --config.data.length_stream="$stream" --config.train.steps="$STREAM_STEPS" \
      --config.train.eval_every=0 --config.train.checkpoint_every="$STREAM_STEPS" \
      --config.train.log_every=$((STREAM_STEPS / 4)) --config.wandb.mode=disabled \
      --config.data.eval_cache_dir="$WORK/eval_sets" ${EXTRA_PILOT:-} >"$dir/$stream.log" 2>&1
    local status=$? metrics
    metrics=$(find "$dir/$stream" -path '*/seed_0/metrics.jsonl' | sort | head -1)
    echo "== length_stream=$stream: $((SECONDS - start)) s$([ $status = 0 ] \
      || echo ", FAILED or cut off"); seed 0's (step, steps/s) pairs:" \
      "$([ -n "$metrics" ] && grep -o '"step": [0-9]*\|"train/steps_per_second": [0-9.]*' \
         "$metrics" | sed 's/.*: //' | paste -sd' ')" | tee -a "$dir/summary.txt"
    tar czf "$OUT/speed_length_stream.tgz" -C "$dir" summary.txt seed.log \
      $([ -f "$dir/shared.log" ] && echo shared.log)
    [ $status = 0 ] || return 1
  done
}

if [ "$STAGE" = speed ]; then
  bench() {  # PART, LIMIT_S, then run_all.sh's entries; the tables so far in speed_PART.tgz
    LIMIT_S=$2 OUT_DIR="$WORK/speed/$1" BUNDLE="$OUT/speed_$1.tgz" \
      bash benchmarks/run_all.sh "${@:3}"
  }
  for part in $SPEED_PARTS; do
    case "$part" in
      first_program) bench first_program "$THROUGHPUT_S" \
        "sweep_throughput --stack points --members $THROUGHPUT_MEMBERS" || failed=1 ;;
      first_program_bf16) bench first_program_bf16 "$THROUGHPUT_S" "sweep_throughput --stack \
points --members $THROUGHPUT_MEMBERS --config.model.dtype=bfloat16 \
--config.model.attention_implementation=cudnn" || failed=1 ;;
      costliest_program) bench costliest_program "$THROUGHPUT_S" "sweep_throughput --members 30 \
--point task.name=duplicate_string,pe.type=transformer_xl,max_position=2048" || failed=1 ;;
      large) bench large "$SPEED_S" "$LARGE" || failed=1 ;;
      large_flags)
        IFS=';' read -ra flag_sets <<< "$LARGE_XLA_FLAGS"
        for i in "${!flag_sets[@]}"; do
          echo "== large with XLA_FLAGS=${flag_sets[$i]}"
          XLA_FLAGS="${XLA_FLAGS:-} ${flag_sets[$i]}" bench "large_flags_$i" "$SPEED_S" "$LARGE" \
            || failed=1
        done ;;
      ensemble) bench ensemble "$SPEED_S" "ensemble_speed --members 1,32 --steps-per-call 10 \
--draw-workers ${DRAW_WORKERS:-4}" || failed=1 ;;
      profiles)
        for i in "${!PROFILES[@]}"; do
          echo "== profile: ${PROFILES[$i]}"
          bench "profile_$i" "$SPEED_S" "step_profile --implementation xla --dtype float32 \
${PROFILES[$i]}" || failed=1
        done ;;
      length_stream) streams || failed=1 ;;
      every_shape) bench every_shape "$THROUGHPUT_S" "sweep_throughput --members 30 --every-shape \
--coverage ${COVERAGE:-0.8} ${EVERY_SHAPE_EXTRA:-}" || failed=1 ;;
    esac
  done
  exit $failed
fi

echo "== pilot: $PILOT_STEPS steps, limit $PILOT_S s"
start=$SECONDS
# A checkpoint every quarter: a pilot cut at its limit comes back with its progress, and the
# same command there, on the same machine, resumes it.
# shellcheck disable=SC2086  # EXTRA_PILOT holds several overrides
timeout -k 10 "$PILOT_S" "$PYTHON" -m pe_research.cli sweep configs/sweeps/randomized_pe_pilot.py \
  --workdir "$WORK/pilot" --config.train.steps="$PILOT_STEPS" \
  --config.train.checkpoint_every=$((PILOT_STEPS / 4)) --config.train.keep_checkpoints=1 \
  --config.data.eval_cache_dir="$WORK/eval_sets" --config.wandb.mode=disabled ${EXTRA_PILOT:-} \
  && "$PYTHON" -m pe_research.cli table "$WORK/pilot/*/*" --metric output_token_accuracy \
       --out "$WORK/pilot/report_paper_metric" \
  || { failed=1; echo "== pilot: FAILED or cut off" >&2; }
echo "== pilot: $((SECONDS - start)) s"
tar czf - -C "$WORK" pilot | split -b 15m - "$OUT/pilot.tgz.part"
exit $failed
