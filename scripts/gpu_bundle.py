"""Installing onto a GPU machine without internet access: pack here, copy over, unpack there, run
the GPU check.

A pod behind a firewall or in an air-gapped site reaches no package index. A typical CUDA image
(NVIDIA's PyTorch containers, Python 3.12) has torch, torchvision, numpy, tensorboard, matplotlib
and the rest of requirements.txt's common libraries, but not MuJoCo, dm_control, Gymnasium, Minari,
MuJoCo Warp or warp-lang, nor libEGL for MuJoCo's headless OpenGL: the bundle holds exactly those.
warp-lang's CUDA library alone compresses to ~75 MB, so for copy channels that cap a transfer (a web
upload, a size-limited sync) the bundle comes in two parts of at most 58 MiB:

    python3 scripts/gpu_bundle.py pack  # with pip's index: .gpu/first/ and .gpu/second/
    # copy the repository with .gpu/ onto the GPU machine (both parts, or one at a time), then
    # there:
    bash scripts/gpu_device.sh --only updates variants envs --minutes 9

The GPU machine unpacks whatever has arrived: the packages with the first part, warp's library once
both parts are there. pip downloads the wheels (CPython 3.12, manylinux, the versions pinned in
requirements*.txt) and apt the EGL packages; what is written here by hand is only the split into
parts, which no tool does.
"""

import argparse
import ctypes.util
import lzma
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / ".gpu"
# the most one part may hold: a 64 MiB transfer cap, less the repository's own files with room to
# grow
PART_ROOM = (64 - 6) * 2**20
# what the image lacks, pinned where this project pins it
PINNED = ("mujoco", "dm_control", "gymnasium", "shimmy", "minari", "mujoco-warp", "warp-lang")
# their dependencies the image lacks (resolved by pip for Python 3.12 beside the image's packages,
# 2026-11)
DEPENDENCIES = ("dm-env==1.6", "dm-tree==0.1.10", "Farama-Notifications==0.0.6", "glfw==2.11.0",
                "labmaze==1.0.6",
                "PyOpenGL==3.1.10", "websockets==17.4")
PLATFORM = ("--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:",
            *(arg
              for tag in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                          "manylinux2014_x86_64") for arg in ("--platform", tag)))
# unused on a GPU and large: dm_control's locomotion assets, MuJoCo's studio, warp's samples, tests
# and CPU compiler
PRUNE = ("dm_control/locomotion", "mujoco/experimental", "warp/examples", "warp/tests",
         "warp/bin/warp-clang.so")
WARP_LIBRARY = Path("warp/bin/warp.so")
# libEGL and what it loads
EGL_PACKAGES = ("libegl1", "libglvnd0", "libopengl0", "libgl1", "libglx0", "libgles2")


def pins() -> list[str]:
    """`name==version` of PINNED, read from requirements*.txt (extras dropped)."""
    found = {}
    for path in ROOT.glob("requirements*.txt"):
        for line in path.read_text().splitlines():
            match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^]]*\])?==(\S+)", line)
            if match and match.group(1) in PINNED:
                found[match.group(1)] = f"{match.group(1)}=={match.group(3)}"
    missing = set(PINNED) - set(found)
    if missing:
        sys.exit(f"error: no pin for {', '.join(sorted(missing))} in requirements*.txt")
    return [found[name] for name in PINNED]


def parts(bundle: Path) -> tuple[Path, Path, Path]:
    """(first part, second part, where the packages unpack) of a bundle folder."""
    return bundle / "first", bundle / "second", bundle / "site"


def pack(bundle: Path = BUNDLE) -> None:
    shutil.rmtree(bundle, ignore_errors=True)
    (first, second, _), build = parts(bundle), bundle / "build"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
                    "--target",
                    str(build), *PLATFORM, *pins(), *DEPENDENCIES], check=True)
    for path in PRUNE:
        target = build / path
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    first.mkdir(parents=True)
    second.mkdir()
    library = bundle / "warp.so.xz"
    with open(library, "wb") as out:
        subprocess.run(["xz", "-T0", "-9", "-c", str(build / WARP_LIBRARY)], stdout=out, check=True)
    (build / WARP_LIBRARY).unlink()
    subprocess.run(["tar", "-C", str(build), "-cJf", str(first / "site.tar.xz"), "."], check=True,
                   env={"XZ_OPT": "-T0 -9", "PATH": "/usr/bin:/bin"})
    (first / "debs").mkdir()
    # amd64 package lists of their own, whatever the packing machine's architecture
    lists = bundle / "apt-lists"
    (lists / "partial").mkdir(parents=True)
    apt = ["apt-get", "-oAPT::Architecture=amd64", "-oAPT::Architectures=amd64",
           f"-oDir::State::Lists={lists}"]
    subprocess.run([*apt, "update"], check=True, capture_output=True)
    subprocess.run([*apt, "download", *EGL_PACKAGES], cwd=first / "debs", check=True,
                   capture_output=True)
    shutil.rmtree(lists)
    room, data = PART_ROOM - folder_bytes(first), library.read_bytes()
    if room <= 0:
        sys.exit(
            f"error: the packages fill the first part ({folder_bytes(first) / 2**20:.0f} MiB); "
            "prune more")
    if len(data) - room > PART_ROOM:
        sys.exit(
            f"error: warp's library needs a third part ({len(data) / 2**20:.0f} MiB compressed)")
    (first / "warp.so.xz.0").write_bytes(data[:room])
    (second / "warp.so.xz.1").write_bytes(data[room:])
    library.unlink()
    shutil.rmtree(build)
    for part in (first, second):
        print(f"{part}: {folder_bytes(part) / 2**20:.1f} MiB")


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def unpack(bundle: Path = BUNDLE) -> str:
    """Unpack what has arrived (idempotent): the packages and the EGL libraries with the first part,
    warp's library once both parts are here. Returns (and prints) one line of what is ready."""
    first, second, site = parts(bundle)
    if not (site / ".complete").exists() and (first / "site.tar.xz").exists():
        with tarfile.open(first / "site.tar.xz") as archive:
            archive.extractall(site, filter="data")
        debs = sorted((first / "debs").glob("*.deb"))
        # no dpkg database needed: unpacked over /
        if debs and ctypes.util.find_library("EGL") is None:
            for deb in debs:
                subprocess.run(["dpkg", "-x", str(deb), "/"], check=True)
            subprocess.run(["ldconfig"], check=True)
        (site / ".complete").touch()
    pieces = [first / "warp.so.xz.0", second / "warp.so.xz.1"]
    library = site / WARP_LIBRARY
    if not library.exists() and all(piece.exists() for piece in pieces):
        with open(library.with_suffix(".tmp"), "wb") as out:
            out.write(lzma.decompress(b"".join(piece.read_bytes() for piece in pieces)))
        library.with_suffix(".tmp").rename(library)
    ready = "packages" if (site / ".complete").exists() else "nothing (copy .gpu/first here)"
    warp = "warp ready" if library.exists() else "warp not yet (copy .gpu/second here)"
    print(f"gpu bundle: {ready}; {warp}", flush=True)
    return f"{ready}; {warp}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("pack", "unpack"))
    {"pack": pack, "unpack": unpack}[parser.parse_args().step]()
