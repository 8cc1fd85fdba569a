#!/usr/bin/env bash
# Launch one managed spot job (train-spot.yaml) per CONFIG and seed, each its own run <config name>_seed<N> in the
# bucket, so every job resumes on its own after a reclaim:
#     scripts/cloud/sweep.sh BUCKET CONFIG [CONFIG ...]
#   SEEDS  seeds to train each config with (default "1 2 3")
# Watch them with `sky jobs queue` and `sky jobs logs <id>`; stop them all with `sky jobs cancel -a`.
set -euo pipefail

usage="usage: scripts/cloud/sweep.sh BUCKET CONFIG [CONFIG ...]  (SEEDS='1 2 3' by default)"
if [ $# -lt 2 ]; then
    echo "error: a bucket and at least one config are needed; $usage" >&2
    exit 2
fi
bucket=$1
shift
read -r -a seeds <<<"${SEEDS:-1 2 3}"
for seed in "${seeds[@]}"; do
    if ! [[ $seed =~ ^[0-9]+$ ]]; then
        echo "error: SEEDS must be whole numbers separated by spaces, got '$seed'; $usage" >&2
        exit 2
    fi
done
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# Every config is checked before the first launch, so a typo does not leave half a sweep running. SkyPilot uploads
# the repository as the job's workdir, so each config is passed relative to it.
configs=()
for config in "$@"; do
    if [ ! -f "$config" ]; then
        echo "error: config file not found: $config; $usage" >&2
        exit 2
    fi
    relative=$(realpath --relative-to="$root" "$config")
    if [[ $relative == ../* ]]; then
        echo "error: $config is outside the repository, so the job would not have it; use a file under configs/" >&2
        exit 2
    fi
    configs+=("$relative")
done

cd "$root"
for config in "${configs[@]}"; do
    for seed in "${seeds[@]}"; do
        run="$(basename "$config" .yaml)_seed$seed"
        sky jobs launch scripts/cloud/train-spot.yaml --name "sac-$run" --yes --detach-run \
            --env BUCKET="$bucket" --env CONFIG="$config" --env RUN="$run" --env ARGS="--set training.seed=$seed"
    done
done
