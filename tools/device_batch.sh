#!/bin/bash
# Paper-scale runs on the lent accelerator; see DEVELOPERS.md ("A lease on the accelerator").
#   usage (there): bash tools/device_batch.sh [--tests] [--bench] [--switches] [--profile] \
#                      EXPERIMENT[:CELL,...][@LR,...][*PROCESSES]...
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
# A second call on the still-warm machine (within 30 s) gets a fresh copy of the working tree: KEEP names
# an archive outside the checkout that carries this call's results/ (runs done, checkpoints) to the next.
keep=${KEEP:-/tmp/device-results.tar}
[ -f "$keep" ] && tar xf "$keep" && echo "restored the last call's results from $keep" | tee "$log"

mkdir -p /tmp/data/MNIST/raw
cp .device/MNIST/*.gz /tmp/data/MNIST/raw/ && gunzip -f /tmp/data/MNIST/raw/*.gz || exit 1
export FEDCORE_DATA=/tmp/data PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export FEDCORE_GIT_COMMIT=$(cat .device/commit 2>/dev/null || echo unknown)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$log"
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
# NAME runs all of an experiment's cells, NAME:CELL,CELL only those (with one process per cell named);
# @LR,LR runs only those learning rates (--lr-grid) and *N runs N processes (a cell's rates are separate
# runs). PARALLEL=1 runs the experiments side by side instead of one after another, and each records the
# processes of the others as sharing the GPU (--alongside); ALONGSIDE=N adds N processes started outside this
# script (e.g. a bf16 check beside it).
parse_spec() {  # sets name, cells, lrs (those named, else none) and n (the processes it runs); callers may make them local
    local spec=$1 procs=""
    [[ $spec == *\** ]] && procs=${spec##*\*} spec=${spec%\**}
    lrs=() cells=()
    if [[ $spec == *@* ]]; then IFS=, read -r -a lrs <<< "${spec#*@}"; spec=${spec%%@*}; fi
    name=${spec%%:*}
    if [[ $spec == *:* ]]; then IFS=, read -r -a cells <<< "${spec#*:}"; fi
    n=${procs:-$(( ${#cells[@]} > 0 ? ${#cells[@]} : jobs ))}
}
all_processes=0
for spec in "$@"; do parse_spec "$spec"; all_processes=$((all_processes + n)); done
run_experiment() {
    local name cells lrs n alongside=${ALONGSIDE:-0}
    parse_spec "$1"
    [ "${PARALLEL:-0}" = 1 ] && alongside=$((alongside + all_processes - n))
    echo "== $1: $(left) s left" | tee -a "$log"
    # SIGTERM: fedcore checkpoints the cells in flight; a later call with the same results/ resumes them
    timeout -k 30 "$(left)" $python -m fedcore reproduce "$name" --scale "$scale" --device "$device" \
        --jobs "$n" --alongside "$alongside" ${cells[@]:+--only "${cells[@]}"} ${lrs[@]:+--lr-grid "${lrs[@]}"} \
        2>&1 | tee -a "$log"
}
side_by_side=()
for spec in "$@"; do
    [ "$(left)" -gt 20 ] || { echo "budget spent before $spec" | tee -a "$log"; break; }
    if [ "${PARALLEL:-0}" = 1 ]; then run_experiment "$spec" & side_by_side+=($!); else run_experiment "$spec"; fi
done
[ ${#side_by_side[@]} -eq 0 ] || wait "${side_by_side[@]}"
kill "$util_logger" 2>/dev/null
tar cf "$keep" results
tar czf "$OUT/results.tgz" --exclude="*.ckpt" $(ls -d results/*/"$scale" runs 2>/dev/null) benchmarks
echo "packed $(tar tzf "$OUT/results.tgz" | grep -c '\.json$') json files in $((SECONDS - start)) s" | tee -a "$log"
# Cells cut off by the budget: their checkpoints in one archive, split into 15 MiB parts (a returned file
# may have 16 MiB, and 8 files come back in all), so that a later call that carries them resumes the cells.
# Here: cat ckpts.tgz.part-* | tar xz
ckpts=$(for c in results/*/"$scale"/*.ckpt; do [ -f "$c" ] && [ ! -f "${c%.ckpt}" ] && echo "$c"; done)  # not of runs done
if [ -n "$ckpts" ]; then
    tar cz $ckpts | split -b 15M - "$OUT/ckpts.tgz.part-"
    echo "checkpoints $(echo $ckpts) -> $(cd "$OUT" && echo ckpts.tgz.part-*)" | tee -a "$log"
fi
