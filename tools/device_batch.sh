#!/bin/bash
# Paper-scale runs on the lent accelerator; see DEVELOPERS.md ("A lease on the accelerator").
#   usage (there): bash tools/device_batch.sh [--tests] [--bench] [--switches] [--profile] EXPERIMENT...
# --tests runs the CUDA tests (nothing else runs if they fail), --bench the engine benchmark
# (benchmarks/engine-cuda.json), --switches the engine under cuDNN autotuning, TF32 matmuls and bf16
# autocast (benchmarks/engine-cuda-switches.json), --profile the profiler's top operators; GPU utilisation
# is logged every 10 s to $OUT/gpu-util.csv (is JOBS enough to fill the GPU?); then `fedcore reproduce NAME
# --scale paper --device cuda` for each experiment in order until the time budget is spent (SIGTERM then:
# the cells in flight checkpoint). results/*/paper and benchmarks/ are packed into $OUT/results.tgz: the
# device tool brings back at most 8 files. The machine has its own torch: no virtualenv, the checkout on
# PYTHONPATH.
set -u -o pipefail
: "${OUT:?OUT is unset: run this through the device tool}"
budget=${BUDGET_S:-540}   # seconds of work; the rest of the 600 s call packs and returns
jobs=${JOBS:-4}
scale=${SCALE:-paper} device=${DEVICE:-cuda} python=${PYTHON:-python3}   # overridable to try it on a CPU
start=$SECONDS
log="$OUT/log.txt"

mkdir -p /tmp/data/MNIST/raw
cp .device/MNIST/*.gz /tmp/data/MNIST/raw/ && gunzip -f /tmp/data/MNIST/raw/*.gz || exit 1
export FEDCORE_DATA=/tmp/data PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export FEDCORE_GIT_COMMIT=$(cat .device/commit 2>/dev/null || echo unknown)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$log"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 10 > "$OUT/gpu-util.csv" 2>&1 &
util_logger=$!
$python -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)" \
    | tee -a "$log"

left() { echo $((budget - (SECONDS - start))); }
while [ $# -gt 0 ]; do
    case "$1" in
        --tests) timeout -k 10 "$(left)" $python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider \
                     2>&1 | tee -a "$log" || { echo "CUDA tests failed: nothing is run" | tee -a "$log"; exit 1; } ;;
        --bench) timeout -k 10 "$(left)" $python -m fedcore bench --device "$device" \
                     --out benchmarks/engine-cuda.json 2>&1 | tee -a "$log" ;;
        --switches) timeout -k 10 "$(left)" $python -m fedcore bench --device "$device" --switches \
                     --out benchmarks/engine-cuda-switches.json 2>&1 | tee -a "$log" ;;
        --profile) timeout -k 10 "$(left)" $python -m fedcore bench --device "$device" --profile \
                     > "$OUT/profile.txt" 2>&1 ;;
        *) break ;;
    esac
    shift
done
for name in "$@"; do
    [ "$(left)" -gt 20 ] || { echo "budget spent before $name" | tee -a "$log"; break; }
    echo "== $name: $(left) s left" | tee -a "$log"
    # SIGTERM: fedcore checkpoints the cells in flight; a later call with the same results/ resumes them
    timeout -k 30 "$(left)" $python -m fedcore reproduce "$name" --scale "$scale" --device "$device" \
        --jobs "$jobs" 2>&1 | tee -a "$log"
done
kill "$util_logger" 2>/dev/null
tar czf "$OUT/results.tgz" --exclude="*.ckpt" $(ls -d results/*/"$scale" 2>/dev/null) benchmarks
echo "packed $(tar tzf "$OUT/results.tgz" | grep -c '\.json$') json files in $((SECONDS - start)) s" | tee -a "$log"
# Cells cut off by the budget: each checkpoint in an archive of its own (a returned file may have 16 MiB,
# and 8 files come back in all, the log, results and the rest of $OUT included), so that a later call
# that carries it resumes the cell.
room=$((8 - $(ls "$OUT" | wc -l)))
i=0
for ckpt in $(ls -t results/*/"$scale"/*.ckpt 2>/dev/null); do
    [ $i -lt $room ] || { echo "checkpoint left behind (8 files come back at most): $ckpt" | tee -a "$log"; continue; }
    i=$((i + 1))
    tar czf "$OUT/ckpt-$i.tgz" "$ckpt"
    echo "checkpoint $ckpt -> ckpt-$i.tgz ($(du -k "$OUT/ckpt-$i.tgz" | cut -f1) KiB)" | tee -a "$log"
done
