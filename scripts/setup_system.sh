#!/usr/bin/env bash
# System libraries for headless MuJoCo rendering: Mesa's EGL and software GL, and OSMesa as the fallback backend. Installs what is missing when run
# as root on a Debian/Ubuntu machine; otherwise says what to install.
set -euo pipefail
need=()
ldconfig -p | grep -q 'libEGL.so.1 ' || need+=(libegl1)
ldconfig -p | grep -q 'libEGL_mesa.so.0 ' || need+=(libegl-mesa0)
ldconfig -p | grep -q 'libGL.so.1 ' || need+=(libgl1)
ldconfig -p | grep -q 'libOSMesa.so' || need+=(libosmesa6)
compgen -G '/usr/lib/*/dri/swrast_dri.so' >/dev/null || compgen -G '/usr/lib/*/dri/*_dri.so' >/dev/null || need+=(libgl1-mesa-dri)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing headless GL libraries: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
else
    echo "error: missing headless GL libraries; install them with: sudo apt-get install ${need[*]}" >&2
    exit 1
fi
