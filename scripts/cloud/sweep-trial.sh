#!/usr/bin/env bash
# One trial of a W&B sweep, as `wandb agent` starts it from a sweep file's command (scripts/cloud/sweep.yaml):
#     scripts/cloud/sweep-trial.sh --config CONFIG KEY=VALUE ...
# trains CONFIG with the sampled KEY=VALUE overrides, resuming, with checkpoints and TensorBoard runs in the bucket
# mounted at /checkpoints (sweep-cluster.yaml) and the metrics in the agent's W&B run. The run is named after the
# config and the sampled values, so any later trial with the same values (W&B starts every trial as a new run and
# never resumes one) continues its checkpoint instead of starting over.
#   PYTHON      interpreter; default .venv/bin/python (after `make setup`)
#   SWEEP_ROOT  where checkpoints/ and runs/ go; default /checkpoints
set -euo pipefail

if [ $# -lt 2 ] || [ "$1" != --config ]; then
    echo "error: expected --config CONFIG KEY=VALUE ..., as a sweep file's command passes them; got: $*" >&2
    exit 2
fi
config=$2
run="$(basename "$config" .yaml)_$(printf '%s\n' "$@" | sha1sum | cut -c1-10)"
root=${SWEEP_ROOT:-/checkpoints}
exec "${PYTHON:-.venv/bin/python}" train_sac.py --resume auto --set "checkpoint.name=$run" \
    --set "checkpoint.dir=$root/checkpoints" --set "logging.tensorboard_dir=$root/runs" --set logging.wandb=true "$@"
