#!/usr/bin/env bash
# A W&B sweep on one SkyPilot cluster, one agent per GPU:
#     BUCKET=<bucket> scripts/cloud/sweep-launch.sh A100:8
# 1. creates the sweep (`wandb sweep`), unless SWEEP_ID names an existing one to add agents to;
# 2. provisions the cluster (sweep-cluster.yaml, `sky launch`): setup only, no run;
# 3. submits one agent per GPU (sweep-agent.yaml, `sky exec --gpus TYPE:1 -d`).
#   BUCKET      required: the bucket for the trials' checkpoints/ and runs/
#   SWEEP_FILE  W&B sweep file (default scripts/cloud/sweep.yaml)
#   SWEEP_ID    entity/project/sweep_id of an existing sweep; default: create one from SWEEP_FILE
#   CLUSTER     cluster name (default sac-sweep)
#   WANDB_PROJECT  project of a new sweep (default pixel-sac)
set -euo pipefail

usage="usage: BUCKET=<bucket> scripts/cloud/sweep-launch.sh GPU_TYPE:COUNT, e.g. A100:8"
if [ $# -ne 1 ] || ! [[ $1 =~ ^([A-Za-z0-9_-]+):([1-9][0-9]*)$ ]]; then
    echo "error: one argument GPU_TYPE:COUNT is needed, got '$*'; $usage" >&2
    exit 2
fi
gpu=${BASH_REMATCH[1]}
count=${BASH_REMATCH[2]}
if [ -z "${BUCKET:-}" ]; then
    echo "error: BUCKET is not set; $usage" >&2
    exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"  # SkyPilot uploads the working directory as the cluster's workdir
sweep_file=${SWEEP_FILE:-scripts/cloud/sweep.yaml}
if [ ! -f "$sweep_file" ]; then
    echo "error: sweep file not found: $sweep_file; $usage" >&2
    exit 2
fi
cluster=${CLUSTER:-sac-sweep}

sweep_id=${SWEEP_ID:-}
if [ -z "$sweep_id" ]; then
    output=$(wandb sweep --project "${WANDB_PROJECT:-pixel-sac}" "$sweep_file" 2>&1) || {
        echo "$output" >&2
        echo "error: wandb sweep failed (see above); run \`wandb login\` first" >&2
        exit 1
    }
    sweep_id=$(grep -o 'wandb agent [^ ]*' <<<"$output" | tail -n 1 | cut -d ' ' -f 3) || true
    if [ -z "$sweep_id" ]; then
        echo "$output" >&2
        echo "error: no sweep id in the output of wandb sweep (above)" >&2
        exit 1
    fi
    echo "created sweep $sweep_id"
fi

sky launch -c "$cluster" scripts/cloud/sweep-cluster.yaml --gpus "$gpu:$count" --env BUCKET="$BUCKET" --yes
for _ in $(seq "$count"); do
    sky exec "$cluster" scripts/cloud/sweep-agent.yaml --gpus "$gpu:1" --env SWEEP_ID="$sweep_id" -d
done
echo "$count agents on $cluster for sweep $sweep_id. Watch: sky queue $cluster; sky logs $cluster <job id>;"
echo "the W&B sweep page. Add agents: SWEEP_ID=$sweep_id scripts/cloud/sweep-launch.sh ...; end: sky down $cluster"
