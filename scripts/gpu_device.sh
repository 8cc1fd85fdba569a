#!/usr/bin/env bash
# The command for a lent GPU machine (docs/gpu/README.md): unpack what scripts/gpu_bundle.py packed and has arrived,
# then run the GPU check with it. The check writes its report into $OUT (the only folder that comes back) after every
# row, so a killed command still returns the rows it finished; .gpu/report (ignored, so it stays between the calls
# of a warm machine) carries the rows from call to call, so they merge.
#   bash scripts/gpu_device.sh --only updates variants envs --minutes 9
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/gpu_bundle.py unpack
export PYTHONPATH="$PWD/.gpu/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# the NVIDIA driver's EGL, mounted with it, for MuJoCo's headless OpenGL
vendor=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
if [ -f "$vendor" ]; then export __EGL_VENDOR_LIBRARY_FILENAMES="$vendor"; fi
mkdir -p .gpu/report
report=${OUT:-.gpu/report}
if [ "$report" != .gpu/report ]; then cp .gpu/report/* "$report"/ 2>/dev/null || true; fi
status=0
python3 -m bench.gpu_check --out "$report" "$@" || status=$?
if [ "$report" != .gpu/report ]; then cp "$report"/* .gpu/report/ 2>/dev/null || true; fi
exit "$status"
