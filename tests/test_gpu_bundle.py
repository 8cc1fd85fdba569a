"""scripts/gpu_bundle.py: the packages an offline GPU machine lacks travel in two parts. The pins
come from the project's requirements, and the machine unpacks what has arrived: the packages with
the first part, warp's library only once the second part is there too, byte for byte."""

import importlib.util
import lzma
import re
import tarfile

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("gpu_bundle", ROOT / "scripts" / "gpu_bundle.py")
gpu_bundle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_bundle)


def test_every_bundled_package_is_pinned_as_the_requirements_pin_it():
    requirements = "\n".join(path.read_text() for path in ROOT.glob("requirements*.txt"))
    pins = gpu_bundle.pins()
    assert [pin.split("==")[0] for pin in pins] == list(gpu_bundle.PINNED)
    for pin in pins:
        name, version = pin.split("==")
        assert re.search(rf"^{re.escape(name)}(\[[^]]*\])?=={re.escape(version)}$", requirements,
                         re.M), pin


def test_unpack_takes_the_packages_from_the_first_part_and_warp_once_both_parts_arrived(tmp_path):
    bundle = tmp_path / ".gpu"
    first, second, site = gpu_bundle.parts(bundle)
    (first / "debs").mkdir(parents=True)
    package = tmp_path / "build" / "warp" / "bin"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("VERSION = 1\n")
    with tarfile.open(first / "site.tar.xz", "w:xz") as archive:
        archive.add(tmp_path / "build", arcname=".")
    library = bytes(range(256)) * 4096  # 1 MiB standing in for warp.so
    packed = lzma.compress(library)
    (first / "warp.so.xz.0").write_bytes(packed[:1000])

    assert gpu_bundle.unpack(bundle) == "packages; warp not yet (copy .gpu/second here)"
    assert (site / "warp" / "__init__.py").read_text() == "VERSION = 1\n"
    second.mkdir()
    (second / "warp.so.xz.1").write_bytes(packed[1000:])
    assert gpu_bundle.unpack(bundle) == "packages; warp ready"
    assert (site / "warp" / "bin" / "warp.so").read_bytes() == library
    assert gpu_bundle.unpack(bundle) == "packages; warp ready", (
        "a second call unpacks nothing again")


def test_a_machine_with_no_part_yet_says_what_to_copy(tmp_path):
    assert gpu_bundle.unpack(tmp_path / ".gpu") == (
        "nothing (copy .gpu/first here); warp not yet (copy .gpu/second here)")
