#!/usr/bin/env bash
# Calibrate servesim's presets on this machine's NVIDIA GPU and collect the results.
#
# usage: PYTHONPATH=. scripts/gpu_check.sh OUTDIR
#
# Needs only python with torch, numpy, scipy and pyyaml (no simpy, no network).
# Writes to OUTDIR, flat: one profile .yaml and one measurements .csv per model, and
# gpu_check.log; at most 8 files. llama-3-8b gets the full grid; mistral-7b and
# qwen2.5-7b, which also fit on one GPU, get the quick grid; the whole script stays
# under 8 minutes. A run that fails is logged and the script goes on to the next.
#
# SERVESIM_CHECK_DEVICE=cpu runs the same path on the CPU with the tiny model (to test
# the script where there is no GPU); PYTHON overrides the interpreter.
set -u -o pipefail

out=${1:?usage: scripts/gpu_check.sh OUTDIR}
mkdir -p "$out"
log="$out/gpu_check.log"
py=${PYTHON:-python3}
device=${SERVESIM_CHECK_DEVICE:-cuda}

# model  grid-flag  budget-s  hard-timeout-s (budget plus model build and start-up)
if [ "$device" = cpu ]; then
    runs=("tiny --quick 40 90")
else
    runs=("llama-3-8b - 170 230" "mistral-7b --quick 60 100" "qwen2.5-7b --quick 60 100")
fi

{
    echo "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) device=$device"
    "$py" - <<'PY'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        print(f"gpu{i}", p.name, f"{p.total_memory / 2**30:.0f} GiB")
PY
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null || true
} >"$log" 2>&1

status=0
for run in "${runs[@]}"; do
    read -r model grid budget limit <<<"$run"
    flag=""
    [ "$grid" = "-" ] || flag=$grid
    name="$device-$model"
    echo "== $name: budget ${budget}s $flag" >>"$log"
    start=$(date +%s)
    # shellcheck disable=SC2086  # $flag is empty or one word
    timeout --signal=INT --kill-after=15 "$limit" \
        "$py" -m calibrate --model "$model" --device "$device" $flag --budget-s "$budget" \
        --no-progress --out "$out/$name.yaml" >>"$log" 2>&1
    rc=$?
    echo "== $name: exit $rc after $(( $(date +%s) - start ))s" >>"$log"
    [ "$rc" -eq 0 ] || status=1
done
echo "done, exit $status" >>"$log"
exit "$status"
