#!/usr/bin/env bash
# The GPU check (issue 6), one script, about 5-7 minutes on a one-GPU machine:
#   1. the device: nvidia-smi, torch's CUDA view; fails at once when CUDA is not available;
#   2. a packed search: `nas search` of 8 trials, 4 workers at --gpus-per-trial 0.25 (four trials share
#      the GPU); checks 8 COMPLETE trials trained on device cuda by 4 different actors;
#   3. the GPU-marked tests (tests/test_gpu.py);
#   4. `nas bench train`: our trainer against a bare PyTorch loop on CPU and GPU, and the aggregate
#      samples/s of 1, 2, 4, 8 trials packed on the GPU (digits, small cells); then the same comparison
#      on 3x32x32 synthetic images (more work per step), packing 1 and 4;
#   5. `nas bench gang` on the GPU: a gang of 1 rank with a whole GPU (DDP over NCCL) against a trainer actor,
#      then gangs of 1 and 2 ranks sharing the GPU (half each: NCCL wants a GPU per rank, so gloo carries
#      the CUDA tensors); one machine with one GPU cannot run 2 NCCL ranks.
# Every step runs under its own time limit and a failed step does not stop the others. Everything is
# written under $OUT (default ./gpu_check_out): gpu_check.log, the search run, bench JSON, summary.txt.
# Exit status 0 only when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT"
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}" RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
exec > >(tee "$OUT/gpu_check.log") 2>&1
PY="${PYTHON:-python3}"
FAILED=()
step() {  # step NAME SECONDS COMMAND...
    local name="$1" limit="$2"; shift 2
    echo; echo "== $name (limit ${limit}s; ${SECONDS}s so far)"
    local t0=$SECONDS
    if timeout --kill-after=10 "$limit" "$@"; then
        echo "-- $name: PASS in $((SECONDS - t0))s" | tee -a "$OUT/summary.txt"
    else
        echo "-- $name: FAIL (status $?) after $((SECONDS - t0))s" | tee -a "$OUT/summary.txt"
        FAILED+=("$name")
    fi
}
: > "$OUT/summary.txt"

device() {
    nvidia-smi || echo "(nvidia-smi not found)"
    "$PY" - <<'PY'
import sys

import torch

print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, available: {torch.cuda.is_available()}")
if not torch.cuda.is_available():
    sys.exit("FAIL: torch sees no CUDA device")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"cuda:{i} {p.name}, {p.total_memory / 2**30:.0f} GiB, capability {p.major}.{p.minor}, "
          f"bf16 {torch.cuda.is_bf16_supported()}")
PY
}

packed_search() {
    "$PY" -m nas.cli search --space nb201 --strategy random --budget 8 --workers 4 --gpus-per-trial 0.25 \
        --cpus-per-trial 1 --epochs 2 --seed 0 --run-dir "$OUT/packed-search" --quiet || return 1
    "$PY" - "$OUT/packed-search" <<'PY'
import sys

from nas.journal import read_journal

rows = list(read_journal(sys.argv[1]))
states = [r.state.value if hasattr(r.state, "value") else str(r.state) for _, r in rows]
devices = [r.metrics.get("device") for _, r in rows]
workers = {r.worker for _, r in rows}
print(f"{len(rows)} trials, states {sorted(set(states))}, devices {sorted(set(map(str, devices)))}, "
      f"{len(workers)} workers; per-trial samples/s: "
      f"{[round(r.metrics.get('samples_per_second', 0)) for _, r in rows]}")
ok = len(rows) == 8 and all(s == "COMPLETE" for s in states) and all(d == "cuda" for d in devices)
sys.exit(0 if ok and len(workers) == 4 else "FAIL: expected 8 COMPLETE trials on cuda from 4 workers")
PY
}

export OUT PY
export -f device packed_search
step "device" 60 bash -c device
if [[ " ${FAILED[*]-} " == *" device "* ]]; then
    echo "CUDA is not available: nothing else to check"; exit 1
fi
step "packed search (8 trials, 4 workers x 0.25 GPU)" 90 bash -c packed_search
step "GPU tests" 75 "$PY" -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider
step "nas bench train (digits; CPU + GPU; packing 1,2,4,8)" 120 \
    "$PY" -m nas.cli bench train --json "$OUT/bench_train_digits.json"
step "nas bench train (synthetic-32 on the GPU; packing 1,4)" 90 \
    "$PY" -m nas.cli bench train --device cuda --dataset synthetic-32 --samples 10000 --epochs 2 \
    --pack 1,4 --pack-trials 1 --json "$OUT/bench_train_synthetic32.json"

step "nas bench gang (DDP on CUDA: 1 rank over NCCL; 2 ranks sharing the GPU over gloo)" 240 bash -c \
    '"$PY" -m nas.cli bench gang --skip fixed --ranks 1 --gpus-per-rank 1 --repeats 2 \
        --json "$OUT/bench_gang_nccl.json" &&
     "$PY" -m nas.cli bench gang --skip fixed --ranks 1,2 --gpus-per-rank 0.5 --repeats 2 \
        --json "$OUT/bench_gang_shared.json"'

echo; echo "== summary (${SECONDS}s in all)"; cat "$OUT/summary.txt"
if ((${#FAILED[@]})); then echo "FAILED: ${FAILED[*]}"; exit 1; fi
echo "all GPU checks passed"
