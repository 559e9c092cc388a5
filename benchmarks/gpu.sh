#!/usr/bin/env bash
# One prepared GPU benchmark: bf16 autocast, eager and torch.compile, batch 512 on CIFAR-sized input,
# for vit_tiny_patch2_32, convit_tiny_patch2_32, simplevit and convmixer (timm twins eager), plus one
# CIFAR-10-shaped epoch (50,000 device-resident images, DeiT augmentation) per model. Prints a compact
# table; with OUT set, also writes $OUT/bench-gpu.json. Extra options are passed on and win over the
# defaults, e.g. `bash benchmarks/gpu.sh --device cpu --batch-size 8` to try it without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python}
json=()
if [[ -n "${OUT:-}" ]]; then json=(--out "$OUT/bench-gpu.json"); fi
exec "$python" -m convinit.bench \
    --device cuda --precision bf16 --compile both --batch-size 512 --channels-last --epoch \
    --models vit_tiny_patch2_32,convit_tiny_patch2_32,simplevit,convmixer --warmup 3 --repeats 10 \
    "${json[@]}" "$@"
