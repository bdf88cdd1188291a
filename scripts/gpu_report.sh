#!/usr/bin/env bash
# Everything to run here, where the simulator and the public tables are installed, on
# the files a lent GPU's scripts/gpu_check.sh brought back.
#
# usage: scripts/gpu_report.sh OUTDIR REPORTDIR [GPU]
#
# OUTDIR is what gpu_check.sh wrote on the device; GPU the servesim name of its GPU
# (default h200), whose shipped vLLM profile the project's own operators are set
# against. Writes REPORTDIR/report.md (each step's command and output) and, when the
# validation archive came back, REPORTDIR/validate/ (servesim validate's files). A
# step whose input did not come back is reported as skipped, and the script goes on;
# it exits 1 if any step failed. PYTHON overrides .venv/bin/python.
set -u -o pipefail

out=${1:?usage: scripts/gpu_report.sh OUTDIR REPORTDIR [GPU]}
rep=${2:?usage: scripts/gpu_report.sh OUTDIR REPORTDIR [GPU]}
gpu=${3:-h200}
py=${PYTHON:-.venv/bin/python}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$rep"
md="$rep/report.md"
status=0

# One step: its title, then the command and what it printed, fenced.
step() {
    local title=$1 rc
    shift
    {
        echo "## $title"
        echo
        echo '```'
        echo "\$ $*"
        "$@" 2>&1
        rc=$?
        echo '```'
        echo
        [ "$rc" -eq 0 ] || printf 'exit %s\n\n' "$rc"
    } >>"$md"
    [ "$rc" -eq 0 ] || status=1
}

skip() {
    printf '## %s\n\nskipped: %s\n\n' "$1" "$2" >>"$md"
}

echo "# GPU run: $out" >"$md"
echo >>"$md"
if [ -f "$out/gpu_check.log" ]; then
    step "gpu_check log" cat "$out/gpu_check.log"
else
    skip "gpu_check log" "no $out/gpu_check.log"
fi

kernels=$(ls "$out"/kernels-cuda.csv 2>/dev/null)
if [ -n "$kernels" ]; then
    step "kernels against the public tables" \
        "$py" "$here/docs/scripts/kernel_compare.py" "$kernels" --gpu "$gpu"
else
    skip "kernels against the public tables" "no $out/kernels-cuda.csv"
fi

for csv in "$out"/cuda-*.csv; do
    [ -f "$csv" ] || { skip "own operators against the tables" "no $out/cuda-*.csv"; break; }
    model=$(basename "$csv" .csv)
    model=${model#cuda-}
    model=${model%.partial}  # a run stopped before its profile keeps NAME.partial.csv
    step "$model's operators against $gpu-$model-tp1-vllm" \
        "$py" "$here/docs/scripts/own_vs_tables.py" "$csv" --profile "$gpu-$model-tp1-vllm"
done

archive=$(ls "$out"/validate-*.tar.gz 2>/dev/null | head -n 1)
if [ -z "$archive" ]; then
    skip "validation replays" "no $out/validate-*.tar.gz"
else
    # validate-DEVICE-MODEL.tar.gz was made from the profile DEVICE-MODEL.yaml.
    name=$(basename "$archive" .tar.gz)
    profile="$out/${name#validate-}.yaml"
    mkdir -p "$rep/replays"
    tar -xzf "$archive" -C "$rep/replays"
    if [ ! -f "$profile" ]; then
        skip "validation replays" "no profile $profile for $archive"
    else
        step "validation replays against $profile" "$py" -m sim.cli validate \
            --replay "$rep"/replays/replay-*.json --profile "$profile" --out "$rep/validate"
    fi
fi
echo "wrote $md (exit $status)"
exit "$status"
