#!/usr/bin/env bash
# The one prepared GPU check, for a fresh machine with one GPU (an H200) and no internet but the package
# registries. Stages run in this order, each capped by `timeout` at the seconds in brackets; a stage that
# ignores its cap is killed 5 s later. Caps and grace sum to 405 s with the install, 340 s without: a
# ten-minute slot leaves time for a rerun (`DRY_RUN=1 bash benchmarks/gpu.sh` prints the plan and sum):
#   install    [60]  pip install -e ".[timm]" from the package registries into $OUT/venv, which sees the
#                    system's packages, constrained to the torch and torchvision already installed (no
#                    second multi-GB torch); INSTALL=0 skips it and uses $PYTHON
#   fabricate  [25]  an ImageNet-style folder of 500x375 JPEGs (CLASSES x PER_CLASS, 5 val per class)
#   audit      [45]  the real training step of each recipe (CIFAR crop/flip, DeiT with mixup/cutmix/EMA/
#                    clipping, paper 1's recipe_aug, ConvMixer with BatchNorm, streamed with and without
#                    mixing) under torch.cuda.set_sync_debug_mode("warn"): synchronising calls per step
#   steps      [95]  trainer-step images/s of ViT-Ti, ConViT-Ti, DeiT-Ti beside timm's same models at 32
#                    and 224 px, bf16: every eager row, then the compiled rows (compile_mode=auto; each
#                    compiles for ~20-40 s, so the cap cuts the last compiled rows first), as fractions of
#                    the measured bf16 matmul rate and of the datasheet peak
#   train      [90]  `convinit train` with compile on the folder, streamed, 4 epochs: SIGTERM once its
#                    first epoch's checkpoint is published, then `--resume` to the end (the resumed run
#                    compiles again, from inductor's on-disk cache); each part is recorded as it ends, and
#                    a cut records what the run had logged and where it stopped
#   stream     [30]  the streamed loader's images/s at 0 / 4 / 8 / 16 workers (the model's 224 px rate is
#                    in the steps table)
#   ddp        [25]  DistributedDataParallel over the real step on one NCCL rank, sharded evaluation
# A stage that fails or reaches its cap is marked so and the next one runs. Every figure is appended to
# one results file, $OUT/results.jsonl, as soon as it is measured; a rerun appends after a "start" line
# (nothing is emptied); each stage's output is in $OUT/<stage>.log; the summary of all stages is printed
# at the end whatever happened. STAGES="steps ddp" reruns only those (fabricate first if their data is
# gone), e.g. in what is left of a GPU loan.
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
        "$python" -c 'import importlib.metadata as m
for name in ("torch", "torchvision"):
    try:
        print(f"{name}=={m.version(name)}")  # the installed build, local version (+cu128) included
    except m.PackageNotFoundError:
        pass' >"$OUT/constraints.txt"
        "$python" -m pip install --quiet --disable-pip-version-check --constraint "$OUT/constraints.txt" \
            -e ".[timm]"
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

published() { # the first epoch's checkpoint is published (not its .tmp folder being written)
    [[ -f "$1/checkpoints/epoch-0001/manifest.json" ]]
}

record_train() { # part exit: what the run has logged so far and its newest published checkpoint
    "$python" - "$RESULTS" "$OUT/train-run" "$1" "$2" <<'EOF'
import json, re, sys
from pathlib import Path
results, run, part, code = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
metrics = run / "metrics.jsonl"
rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
names = [p.name for p in (run / "checkpoints").glob("epoch-*") if re.fullmatch(r"epoch-\d+(-step-\d+)?", p.name)]
last = rows[-1] if rows else {}
with open(results, "a") as file:
    file.write(json.dumps({"stage": "train", "part": part, "exit": code, "epochs": last.get("epoch", 0),
                           "stopped_at": max(names, default=None), "test_acc": last.get("test_acc"),
                           "train_images_per_s": [r.get("images_per_s") for r in rows[1:]]}) + "\n")
EOF
}

train_kill_resume() { # first run stopped by SIGTERM after its first checkpoint, then resumed
    local run=$OUT/train-run compile=true
    [[ "$SCALE" == tiny ]] && compile=false # torch.compile costs minutes on two CPU cores
    rm -rf "$run"
    trap 'record_train cut 124; exit 124' TERM # the cap: record what was measured (the run gets it too)
    "$python" -m convinit train --config deit dataset=folder "data_dir=$DATA" data_mode=stream model=deit_tiny \
        "img_size=$TRAIN_PX" epochs=4 warmup_epochs=0 "batch_size=$BATCH" "workers=$WORKERS" \
        "compile=$compile" "device=$DEVICE" "${TRAIN_SMALL[@]}" --no-progress --out "$run" &
    local pid=$!
    until published "$run" || ! kill -0 "$pid" 2>/dev/null; do
        sleep 0.2 # the first epoch's published checkpoint is the event the kill waits for
    done
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    local first=$?
    record_train killed "$first"
    "$python" -m convinit train --resume "$run" --no-progress
    local resumed=$?
    record_train resumed "$resumed"
    [[ $first -eq 143 && $resumed -eq 0 ]] && tail -n 1 "$run/metrics.jsonl" | grep -q '"epoch": 4,'
}

if [[ "${1:-}" == --stage ]]; then
    stage_body "$2"
    exit $?
fi

if [[ "${1:-}" == --published ]]; then # for the test of the kill trigger
    published "$2"
    exit $?
fi

declare -A CAP=([install]=60 [fabricate]=25 [audit]=45 [steps]=95 [train]=90 [stream]=30 [ddp]=25)
GRACE=5 # seconds between a stage's cap (SIGTERM) and SIGKILL
ORDER=(fabricate audit steps train stream ddp)

run_stage() { # name cap: the stage under its cap, its status appended to the results
    local name=$1 cap=$2 start=$SECONDS status=ok
    timeout --kill-after="$GRACE" "$cap" bash "$SCRIPT" --stage "$name" >"$OUT/$name.log" 2>&1
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

STAGES=${STAGES:-${ORDER[*]}}
planned=()
if [[ "${INSTALL:-1}" != 0 ]]; then planned+=(install); fi
for name in "${ORDER[@]}"; do
    if [[ " $STAGES " == *" $name "* ]]; then planned+=("$name"); fi
done
if [[ "${DRY_RUN:-0}" != 0 ]]; then # the plan and its worst case, nothing run
    total=0
    for name in "${planned[@]}"; do
        echo "stage $name cap ${CAP[$name]} grace $GRACE"
        total=$((total + CAP[$name] + GRACE))
    done
    echo "worst case $total s"
    exit 0
fi

mkdir -p "$OUT"
first=$(($(cat "$RESULTS" 2>/dev/null | wc -l) + 1)) # this run's lines start here: a rerun appends
printf '{"stage": "start", "stages": "%s", "at": "%s"}\n' "${planned[*]}" "$(date -u +%FT%TZ)" >>"$RESULTS"
trap summary EXIT
for name in "${planned[@]}"; do
    run_stage "$name" "${CAP[$name]}"
done
! tail -n +"$first" "$RESULTS" | grep -q '"status": "[cf]' # exit 1 when a stage of this run failed or was cut
