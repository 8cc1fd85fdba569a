#!/usr/bin/env bash
# System packages: Mesa's EGL and software GL for headless MuJoCo rendering, OSMesa as the fallback backend, and tmux
# for scripts/tmux_train.sh. Installs what is missing on a Debian/Ubuntu machine as root, or through passwordless sudo
# (cloud VMs log in as a sudoer, e.g. SkyPilot's setup step); otherwise says what to install.
set -euo pipefail
need=()
ldconfig -p | grep -q 'libEGL.so.1 ' || need+=(libegl1)
ldconfig -p | grep -q 'libEGL_mesa.so.0 ' || need+=(libegl-mesa0)
ldconfig -p | grep -q 'libGL.so.1 ' || need+=(libgl1)
ldconfig -p | grep -q 'libOSMesa.so' || need+=(libosmesa6)
compgen -G '/usr/lib/*/dri/swrast_dri.so' >/dev/null || compgen -G '/usr/lib/*/dri/*_dri.so' >/dev/null || need+=(libgl1-mesa-dri)
command -v tmux >/dev/null || need+=(tmux)
[ ${#need[@]} -eq 0 ] && exit 0
cannot_install() {
    echo "error: missing system packages; install them with: sudo apt-get install ${need[*]}" >&2
    exit 1
}
command -v apt-get >/dev/null || cannot_install
if [ "$(id -u)" = 0 ]; then
    as_root=(env)
elif sudo -n true 2>/dev/null; then
    as_root=(sudo -n env)
else
    cannot_install
fi
echo "installing system packages: ${need[*]}"
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
