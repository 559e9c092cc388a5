#!/usr/bin/env bash
# The one prepared GPU check, for a fresh machine with one GPU (an H200) and no internet but the package
# registries. Stages run in this order, each capped by `timeout` at the seconds in brackets (caps sum to
# 560 s, and a stage that ignores its cap is killed 5 s later: the script ends within ten minutes):
#   install   [150]  pip install -e ".[timm]" from the package registries into $OUT/venv, which sees the
#                    system's packages (INSTALL=0 skips it and uses $PYTHON)
#   fabricate  [30]  an ImageNet-style folder of 500x375 JPEGs (CLASSES x PER_CLASS, 5 val per class)
#   audit      [60]  the real training step of each recipe (CIFAR crop/flip, DeiT with mixup/cutmix/EMA/
#                    clipping, paper 1's recipe_aug, ConvMixer with BatchNorm, streamed with and without
#                    mixing) under torch.cuda.set_sync_debug_mode("warn"): synchronising calls per step
#   steps     [120]  trainer-step images/s of ViT-Ti, ConViT-Ti, DeiT-Ti beside timm's same models at 32
#                    and 224 px, bf16: every eager row, then the compiled rows (compile_mode=auto; each
#                    compiles for ~20-40 s, so the cap cuts the last compiled rows first), as fractions of
#                    the measured bf16 matmul rate and of the datasheet peak
#   train     [120]  `convinit train` with compile on the folder, streamed, 4 epochs: SIGTERM once its
#                    first epoch's checkpoint exists, then `--resume` to the end (the resumed run
#                    compiles again, from inductor's on-disk cache)
#   stream     [50]  the streamed loader's images/s at 0 / 4 / 8 / 16 workers (the model's 224 px rate is
#                    in the steps table)
#   ddp        [30]  DistributedDataParallel over the real step on one NCCL rank, sharded evaluation
# A stage that fails or reaches its cap is marked so and the next one runs. Every figure is appended to
# one results file, $OUT/results.jsonl, as soon as it is measured; each stage's output is in
# $OUT/<stage>.log; the summary of all stages is printed at the end whatever happened. STAGES="steps ddp"
# reruns only those (fabricate first if their data is gone), e.g. in what is left of a GPU loan.
# CPU path (tested in CI): DEVICE=cpu SCALE=tiny INSTALL=0 OUT=/tmp/gpu bash benchmarks/gpu.sh
set -uo pipefail # no -e: one failing stage must not stop the others
SCRIPT=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$SCRIPT")/.."
OUT=${OUT:-gpu-results}
python=${PYTHON:-python}
if [[ -x "$OUT/venv/bin/python" ]]; then python=$OUT/venv/bin/python; fi # made by the install stage
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" # this checkout's code, installed or not
DEVICE=${DEVICE:-cuda}
SCALE=${SCALE:-full}
RESULTS=$OUT/results.jsonl
DATA=$OUT/images
if [[ "$SCALE" == tiny ]]; then # seconds on two CPU cores: the same stages on toy sizes
    CLASSES=2 PER_CLASS=8 BATCH=4 STEPS=1 WORKERS=0 TRAIN_PX=32 STREAM_WORKERS=0 STREAM_IMAGES=8
    SMALL=(--override img_size=32 --override model_args.depth=1) TRAIN_SMALL=(model_args.depth=1)
    STEP_ARGS=(--models ViT-Ti --sizes 32 --batch 2 --warmup 1 --repeats 1 --no-timm)
    DDP_ARGS=(--batch 50 --override per_class=10 --override model_args.depth=1)
else
    CLASSES=20 PER_CLASS=40 BATCH=128 STEPS=5 WORKERS=8 TRAIN_PX=224 STREAM_WORKERS=0,4,8,16 STREAM_IMAGES=256
    SMALL=() TRAIN_SMALL=()
    STEP_ARGS=(--batch 256 --warmup 3 --repeats 10 --compiled)
    DDP_ARGS=(--batch 256)
fi

stage_body() { # the work of one stage; run by `timeout` as `bash gpu.sh --stage NAME`
    case "$1" in
    install) # a venv that sees the system's packages (a preinstalled CUDA torch is reused), else plain pip
        if "$python" -m venv --system-site-packages "$OUT/venv"; then python=$OUT/venv/bin/python; fi
        "$python" -m pip install --quiet --disable-pip-version-check -e ".[timm]"
        ;;
    fabricate)
        "$python" -c "from convinit.speed.stream import fabricate_folder; \
fabricate_folder('$DATA', $CLASSES, $PER_CLASS)"
        ;;
    audit)
        "$python" -m convinit.speed.gpu audit --results "$RESULTS" --device "$DEVICE" --batch "$BATCH" \
            --folder "$DATA" --steps "$STEPS" --loader-workers "$WORKERS" "${SMALL[@]}"
        ;;
    steps) "$python" -m convinit.speed.gpu steps --results "$RESULTS" --device "$DEVICE" "${STEP_ARGS[@]}" ;;
    train) train_kill_resume ;;
    stream)
        "$python" -m convinit.speed.gpu stream --results "$RESULTS" --workers "$STREAM_WORKERS" \
            --images "$STREAM_IMAGES" --size "$TRAIN_PX"
        ;;
    ddp) "$python" -m convinit.speed.gpu ddp --results "$RESULTS" --device "$DEVICE" "${DDP_ARGS[@]}" ;;
    esac
}

train_kill_resume() { # first run stopped by SIGTERM after its first checkpoint, then resumed
    local run=$OUT/train-run compile=true
    [[ "$SCALE" == tiny ]] && compile=false # torch.compile costs minutes on two CPU cores
    rm -rf "$run"
    "$python" -m convinit train --config deit dataset=folder "data_dir=$DATA" data_mode=stream model=deit_tiny \
        "img_size=$TRAIN_PX" epochs=4 warmup_epochs=0 "batch_size=$BATCH" "workers=$WORKERS" \
        "compile=$compile" "device=$DEVICE" "${TRAIN_SMALL[@]}" --no-progress --out "$run" &
    local pid=$!
    until compgen -G "$run/checkpoints/epoch-0001*" >/dev/null || ! kill -0 "$pid" 2>/dev/null; do
        sleep 0.2 # the first epoch's checkpoint is the event the kill waits for
    done
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    local first=$?
    "$python" -m convinit train --resume "$run" --no-progress
    local resumed=$?
    "$python" - "$RESULTS" "$run" "$first" "$resumed" <<'EOF'
import json, sys
from pathlib import Path
results, run, first, resumed = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
last = rows[-1]
with open(results, "a") as file:
    file.write(json.dumps({"stage": "train", "killed_exit": first, "resumed_exit": resumed,
                           "epochs": last["epoch"], "train_images_per_s": [r.get("images_per_s") for r in rows[1:]],
                           "test_acc": last.get("test_acc")}) + "\n")
sys.exit(0 if first == 143 and resumed == 0 and last["epoch"] == 4 else 1)
EOF
}

if [[ "${1:-}" == --stage ]]; then
    stage_body "$2"
    exit $?
fi

declare -A CAP=([fabricate]=30 [audit]=60 [steps]=120 [train]=120 [stream]=50 [ddp]=30)

run_stage() { # name cap: the stage under its cap, its status appended to the results
    local name=$1 cap=$2 start=$SECONDS status=ok
    timeout --kill-after=5 "$cap" bash "$SCRIPT" --stage "$name" >"$OUT/$name.log" 2>&1
    local rc=$?
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        status="cut at its ${cap} s cap"
    elif [[ $rc -ne 0 ]]; then
        status="failed (exit $rc, see $OUT/$name.log)"
    fi
    printf '{"stage": "status", "name": "%s", "status": "%s", "seconds": %d, "cap": %d}\n' \
        "$name" "$status" $((SECONDS - start)) "$cap" >>"$RESULTS"
    echo "[$name] $status after $((SECONDS - start)) s"
}

summary() {
    if [[ -x "$OUT/venv/bin/python" ]]; then python=$OUT/venv/bin/python; fi
    echo "== results ($RESULTS)"
    "$python" -m convinit.speed.gpu summary --results "$RESULTS" 2>/dev/null || cat "$RESULTS"
}

mkdir -p "$OUT"
: >"$RESULTS"
trap summary EXIT
STAGES=${STAGES:-fabricate audit steps train stream ddp}
if [[ "${INSTALL:-1}" != 0 ]]; then run_stage install 150; fi
for name in fabricate audit steps train stream ddp; do
    if [[ " $STAGES " == *" $name "* ]]; then run_stage "$name" "${CAP[$name]}"; fi
done
! grep -q '"status": "[cf]' "$RESULTS" # exit 1 when any stage failed or was cut
