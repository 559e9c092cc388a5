#!/usr/bin/env bash
# One prepared GPU benchmark, in two parts.
# 1. `convinit bench`: bf16 autocast, eager and torch.compile, batch 512 on CIFAR-sized input, for
#    vit_tiny_patch2_32, convit_tiny_patch2_32, simplevit and convmixer (timm twins eager), one
#    CIFAR-10-shaped epoch (50,000 device-resident images, DeiT augmentation) per model, and the
#    streamed path's decode + DeiT-transform rate per DataLoader worker count. Extra options are passed
#    to it and win over the defaults, e.g. `bash benchmarks/gpu.sh --device cpu --batch-size 8`.
# 2. A streamed ImageNet-style run: STREAM_CLASSES x STREAM_PER_CLASS fabricated 500x375 JPEGs (default
#    100 x 30) in class folders, trained for one epoch of the `deit` preset with deit_tiny at 224 px,
#    forced onto the streamed path by a tiny data budget (STREAM_CLASSES=0 skips it).
# Prints compact tables; with OUT set, also writes $OUT/bench-gpu.json and $OUT/stream-run/metrics.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python}
json=()
if [[ -n "${OUT:-}" ]]; then json=(--out "$OUT/bench-gpu.json"); fi
"$python" -m convinit.bench \
    --device cuda --precision bf16 --compile both --batch-size 512 --channels-last --epoch \
    --models vit_tiny_patch2_32,convit_tiny_patch2_32,simplevit,convmixer --warmup 3 --repeats 10 \
    --stream-workers 0,4,8,16 "${json[@]}" "$@"

classes=${STREAM_CLASSES:-100}
if [[ "$classes" -gt 0 ]]; then
    data=$(mktemp -d)
    trap 'rm -rf "$data"' EXIT
    "$python" -c "from convinit.bench.stream import fabricate_folder; \
fabricate_folder('$data/images', $classes, ${STREAM_PER_CLASS:-30})"
    run=${OUT:+$OUT/stream-run}
    "$python" -m convinit train --config deit dataset=folder "data_dir=$data/images" model=deit_tiny \
        epochs=1 warmup_epochs=0 data_budget_gb=0.0001 "workers=${STREAM_WORKERS:-16}" \
        "batch_size=${STREAM_BATCH:-256}" "img_size=${STREAM_IMG_SIZE:-224}" \
        "device=${STREAM_DEVICE:-auto}" --out "${run:-$data/run}"
fi
