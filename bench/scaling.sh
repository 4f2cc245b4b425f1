#!/bin/sh
# Parallel scaling on this machine's cores: fresh `twin sweep` and `twin arena` processes on 1, 2
# and all cores (fixed start-up, a run's cost, efficiency; cold and through a warm process) and
# `Market-v0` vectorised with `gymnasium.make_vec` (async, and the twin's own vector env with
# several envs to a process) on 1 and all cores. Run from a
# checkout (or anywhere the twin is installed): sh bench/scaling.sh [python]
set -eu
PY=${1:-python3}
export OPENBLAS_NUM_THREADS=1 PYTHONUNBUFFERED=1
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); cores: $(nproc)"
"$PY" --version
for which in sweep arena rl; do
    "$PY" -m twin bench "$which"
done
