#!/usr/bin/env bash
# On a GPU machine without internet access: unpack what scripts/gpu_bundle.py packed and has been copied here, then
# run the GPU check with it. The report accumulates in .gpu/report, so checks split over several commands (--only,
# --missing) merge into one. REPORT_DIR=<folder> writes it there instead (a volume that outlives the pod), starting
# from .gpu/report's rows and copied back at the end. The check rewrites its report after every row, so a command
# killed at a time limit keeps the rows it finished.
#   bash scripts/gpu_device.sh --only updates variants envs --minutes 9
#   REPORT_DIR=/workspace/gpu-report bash scripts/gpu_device.sh --missing
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/gpu_bundle.py unpack
export PYTHONPATH="$PWD/.gpu/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# the NVIDIA driver's EGL, mounted with it, for MuJoCo's headless OpenGL
vendor=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
if [ -f "$vendor" ]; then export __EGL_VENDOR_LIBRARY_FILENAMES="$vendor"; fi
mkdir -p .gpu/report
report=${REPORT_DIR:-.gpu/report}
if [ "$report" != .gpu/report ]; then cp .gpu/report/* "$report"/ 2>/dev/null || true; fi
status=0
python3 -m bench.gpu_check --out "$report" "$@" || status=$?
if [ "$report" != .gpu/report ]; then cp "$report"/* .gpu/report/ 2>/dev/null || true; fi
exit "$status"
