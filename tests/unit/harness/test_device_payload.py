"""The payload's way to the device: build_payload.py lays its pieces end to end and cuts the stream into parts;
unpack_payload.sh (with payload_members.py) checks the parts, cuts the pieces out again, unpacks the xz and installs
the wheels carried whole (vLLM-Omni 0.30's torch 2.13 stack) into site/. Rehearsed here with small pieces and a
part size that cuts through each of them; a part that changed, a part missing and a manifest that does not add up
must each stop the unpack with a message, before anything is unpacked.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from testlib import REPO

DEVICE = REPO / "tests" / "device"


def builder(monkeypatch, tmp: Path, part_bytes: int):
    spec = importlib.util.spec_from_file_location("build_payload_under_test", DEVICE / "build_payload.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "DEVICE", tmp)
    monkeypatch.setattr(module, "PART_BYTES", part_bytes)
    return module


def engine_xz(path: Path) -> Path:
    """An xz like the builder's: site/, lib/ and lib-fallback/."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        for name, text in (("site/staged_pkg/__init__.py", "VERSION = 'staged'\n"), ("lib/libcarried.so.1", "x"),
                           ("lib-fallback/libz.so.1", "y")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    subprocess.run(["xz", "-c"], input=raw.getvalue(), stdout=path.open("wb"), check=True)
    return path


def wheel(path: Path) -> Path:
    """A wheel with a package, its dist-info and a .data/purelib entry (pip puts that in site/ too)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("gpu_pkg/__init__.py", "VERSION = '2.13.0'\n" + "# padding\n" * 500)
        zf.writestr("gpu_pkg-2.13.0.dist-info/METADATA", "Name: gpu-pkg\nVersion: 2.13.0\n")
        zf.writestr("gpu_pkg-2.13.0.data/purelib/gpu_pkg_extra.py", "EXTRA = True\n")
        zf.writestr("gpu_pkg-2.13.0.data/scripts/gpu-tool", "#!/bin/sh\n")
    return path


@pytest.fixture
def payload(tmp_path, monkeypatch):
    prefix = "payload-test"
    build = builder(monkeypatch, tmp_path, part_bytes=700)
    pieces = [engine_xz(tmp_path / f"{prefix}.engine.tar.xz"), wheel(tmp_path / "gpu_pkg-2.13.0-py3-none-any.whl")]
    members, parts = build.split(prefix, pieces)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"members": members, "parts": parts}))
    return tmp_path, manifest, pieces, members, parts


def unpack(tmp: Path, manifest: Path, parts: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(DEVICE / "unpack_payload.sh"), str(tmp / "stage"), *parts], cwd=REPO,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEVICE_PAYLOAD": str(manifest)},
                          capture_output=True, text=True, timeout=120, check=False)


def test_pieces_are_laid_end_to_end_and_cut_into_parts(payload):
    tmp, _manifest, pieces, members, parts = payload
    assert [m["name"] for m in members] == ["engine.tar.xz", "gpu_pkg-2.13.0-py3-none-any.whl"]
    assert members[1]["offset"] == members[0]["bytes"] == pieces[0].stat().st_size
    assert all(p["bytes"] == 700 for p in parts[:-1]) and 0 < parts[-1]["bytes"] <= 700
    stream = b"".join((tmp / p["name"]).read_bytes() for p in parts)
    assert stream == pieces[0].read_bytes() + pieces[1].read_bytes()
    assert members[1]["sha256"] == hashlib.sha256(pieces[1].read_bytes()).hexdigest()


def test_unpack_gives_site_with_the_whole_wheels_installed(payload):
    tmp, manifest, _pieces, _members, parts = payload
    done = unpack(tmp, manifest, [str(tmp / p["name"]) for p in reversed(parts)])  # any order: sorted by number
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp / "stage" / "site"
    assert (site / "staged_pkg" / "__init__.py").read_text() == "VERSION = 'staged'\n"
    assert (site / "gpu_pkg" / "__init__.py").read_text().startswith("VERSION = '2.13.0'")
    assert (site / "gpu_pkg-2.13.0.dist-info" / "METADATA").exists()  # the venv's version check reads it
    assert (site / "gpu_pkg_extra.py").exists() and not (site / "gpu_pkg-2.13.0.data").exists()
    assert (tmp / "stage" / "lib" / "libcarried.so.1").exists()
    assert list((tmp / "stage" / "whole").iterdir()) == []  # the pieces go once used: disk is the device's
    assert "sha256 checked" in done.stdout


def test_a_changed_or_missing_part_or_a_short_manifest_stops_the_unpack(payload):
    tmp, manifest, _pieces, _members, parts = payload
    paths = [str(tmp / p["name"]) for p in parts]
    missing = unpack(tmp, manifest, paths[:-1])
    assert missing.returncode != 0 and "parts given" in missing.stderr
    changed = Path(paths[1])
    original = changed.read_bytes()
    changed.write_bytes(b"\0" + original[1:])
    bad = unpack(tmp, manifest, paths)
    assert bad.returncode != 0 and f"{paths[1]}: sha256 differs" in bad.stderr
    assert not (tmp / "stage" / "site").exists()  # checked before anything was unpacked
    changed.write_bytes(original)
    short = json.loads(manifest.read_text())
    short["members"][1]["bytes"] -= 10
    manifest.write_text(json.dumps(short))
    over = unpack(tmp, manifest, paths)
    assert over.returncode != 0 and "sha256" in over.stderr


def test_a_manifest_without_members_is_one_xz(tmp_path, monkeypatch):
    """The 0.26.0 payloads of earlier runs (tests/device/payload.json before members) still unpack."""
    build = builder(monkeypatch, tmp_path, part_bytes=100)
    xz = engine_xz(tmp_path / "engine.tar.xz")
    _members, parts = build.split("engine.tar.xz", [xz])
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"parts": parts}))
    done = unpack(tmp_path, manifest, [str(tmp_path / p["name"]) for p in parts])
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "stage" / "site" / "staged_pkg" / "__init__.py").exists()
    assert [p["name"] for p in parts][:2] == ["engine.tar.xz.part0", "engine.tar.xz.part1"]  # the names of old


def test_every_engine_has_its_manifest_and_the_0_30_payload_carries_torch_2_13_whole():
    build = importlib.util.spec_from_file_location("build_payload_engines", DEVICE / "build_payload.py")
    module = importlib.util.module_from_spec(build)
    build.loader.exec_module(module)
    for version, engine in module.ENGINES.items():
        manifest = json.loads((DEVICE / engine["manifest"]).read_text())
        assert manifest["lock"]["path"] == f"data/locks/ubuntu2404/{engine['lock']}.txt", version
        assert {w["name"] for w in manifest.get("whole_wheels", [])} == set(engine["gpu_wheels"]), version
    whole = {w["name"]: w["version"] for w in json.loads((DEVICE / "payload-0.30.0.json").read_text())["whole_wheels"]}
    assert whole["torch"] == "2.13.0" and whole["nvidia-nccl-cu13"] == "2.29.7"
