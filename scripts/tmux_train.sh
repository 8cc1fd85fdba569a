#!/usr/bin/env bash
# Train in a tmux session that outlives the ssh connection:
#     scripts/tmux_train.sh CONFIG [train_sac.py options]
# runs `train_sac.py --config CONFIG --resume auto [options]` in the session `sac-<run name>`, appending its output
# to <logging.tensorboard_dir>/<run name>/train.log, then attaches when called from a terminal. While that session
# runs, another call only says so (and attaches); once it has ended (finished, crashed, pod restarted) the same call
# starts a new one, which resumes from the newest checkpoint. CONFIG is found from where you are; paths in the
# options are relative to the repository root, where the trainer runs.
#   TMUX_SESSION  session name instead of sac-<run name>
#   PYTHON        interpreter; default .venv/bin/python when it exists (after `make setup`), else python3
#   TMUX_TMPDIR   tmux's own: where the server socket lives (tests use a private one)
set -euo pipefail

usage="usage: scripts/tmux_train.sh CONFIG [train_sac.py options, e.g. --set training.episodes=500]"
if [ $# -lt 1 ] || [[ $1 == -* ]]; then
    echo "error: the first argument must be a config file; $usage" >&2
    exit 2
fi
if [ ! -f "$1" ]; then
    echo "error: config file not found: $1; pass an existing file, e.g. $usage" >&2
    exit 2
fi
if ! command -v tmux >/dev/null; then
    echo "error: tmux is not installed; run scripts/setup_system.sh as root (or: sudo apt-get install tmux)" >&2
    exit 1
fi
config=$(realpath "$1")
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

# The run name and log directory come from the resolved config, so --set overrides of them count, and a config error
# is reported here, in one line, before any tmux session starts.
# Overrides are `--set KEY=VALUE`, `--set=KEY=VALUE` or a bare KEY=VALUE, as train_sac.py takes them; the value of an
# option that takes one (--set, --resume) is never read as a bare override.
sets=()
args=("$@")
i=0
while [ "$i" -lt "${#args[@]}" ]; do
    case ${args[i]} in
        --set) sets+=(--set "${args[i + 1]:-}"); i=$((i + 1)) ;;
        --resume) i=$((i + 1)) ;;
        --set=*) sets+=("${args[i]}") ;;
        -*) ;;
        *=*) sets+=(--set "${args[i]}") ;;
    esac
    i=$((i + 1))
done
resolved=$("$PYTHON" -m trainer.config "$config" "${sets[@]}" --print run_name --print logging.tensorboard_dir)
{ read -r run_name; read -r runs_dir; } <<<"$resolved"
log=$(realpath -m "$runs_dir/$run_name/train.log")
session=${TMUX_SESSION:-sac-$run_name}
session=${session//[.:]/_}  # tmux turns these into '_' in session names

# The pane's shell stays in charge of the trainer: tmux kill-session (SIGHUP to the shell alone) becomes the SIGTERM
# the trainer saves on, Ctrl-C is passed on as SIGINT (a second one stops it at once), and the exit status reaches the
# log. The trainer is started as a job of its own (set -m, then off again to keep job notices out of the pane) so that
# it gets only these forwarded signals; tee ignores them all so its last lines, naming the checkpoint saved on the way
# out, are logged too.
# shellcheck disable=SC2016  # the pane's bash expands these, from the arguments given after the script
trainer='python=$1 log=$2
shift 2
echo "== $(date "+%F %T") $python train_sac.py $*" >>"$log"
set -m
PYTHONUNBUFFERED=1 "$python" train_sac.py "$@" > >(trap "" INT TERM HUP; exec tee -a "$log") 2>&1 &
pid=$!
set +m
trap "kill -INT $pid" INT
trap "kill -TERM $pid" TERM HUP
while wait "$pid"; status=$?; kill -0 "$pid" 2>/dev/null; do :; done
echo "exit status $status" | tee -a "$log"
exit "$status"'

if tmux has-session -t "=$session" 2>/dev/null; then
    echo "tmux session '$session' is already running (log: $log); attach with: tmux attach -t $session"
else
    mkdir -p "$(dirname "$log")"
    tmux new-session -d -s "$session" -c "$root" bash -c "$trainer" tmux_train "$PYTHON" "$log" \
        --config "$config" --resume auto "$@"
    echo "started tmux session '$session' (log: $log); attach with: tmux attach -t $session, detach with Ctrl+B then D"
fi

if [ -t 0 ] && [ -t 1 ]; then
    if [ -n "${TMUX:-}" ]; then
        exec tmux switch-client -t "=$session"
    fi
    exec tmux attach-session -t "=$session"
fi
