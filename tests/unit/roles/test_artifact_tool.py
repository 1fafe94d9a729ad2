"""roles/artifacts/files/artifact.py against a real rsync daemon on loopback: manifest, pull, re-run, repair."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "roles" / "artifacts" / "files" / "artifact.py"
pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync (make tools installs it)")


def load():
    spec = importlib.util.spec_from_file_location("artifact_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def served(tmp_path):
    """A model-shaped source directory, its manifest, and an rsync daemon serving it on loopback."""
    source = tmp_path / "source"
    (source / "sub").mkdir(parents=True)
    (source / "config.json").write_text('{"model_type": "qwen3_omni_moe"}')
    (source / "model-00001.safetensors").write_bytes(os.urandom(3 << 20))
    (source / "sub" / "tokenizer.json").write_bytes(os.urandom(1 << 20))
    port = free_port()
    (tmp_path / "rsyncd.conf").write_text(
        f"port = {port}\naddress = 127.0.0.1\nuse chroot = no\nread only = yes\n"
        f"[model]\n    path = {source}\n    hosts allow = 127.0.0.1\n")
    daemon = subprocess.Popen(["rsync", "--daemon", "--no-detach", f"--config={tmp_path / 'rsyncd.conf'}"])
    for _attempt in range(50):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    tool = load()
    manifest = tmp_path / "model.json"
    tool.make_manifest(source, "model", manifest)
    yield tool, source, manifest, f"rsync://127.0.0.1:{port}/model"
    daemon.terminate()
    daemon.wait(timeout=10)


def test_a_pull_makes_the_destination_exactly_the_manifest_and_a_rerun_transfers_nothing(served, tmp_path):
    tool, source, manifest, url = served
    dest = tmp_path / "dest"
    first = tool.pull(dest, manifest, [url], full=False)
    assert first["bytes_received"] >= 4 << 20 and first["source"] == url and first["repaired"] == []
    assert (dest / "sub" / "tokenizer.json").read_bytes() == (source / "sub" / "tokenizer.json").read_bytes()
    again = tool.pull(dest, manifest, [url], full=False)
    assert again["bytes_received"] == 0 and again["source"] is None
    assert "already here, 3 files checked" in again["line"]


def test_a_corrupted_file_and_a_stray_one_are_replaced_and_removed(served, tmp_path):
    tool, source, manifest, url = served
    dest = tmp_path / "dest"
    tool.pull(dest, manifest, [url], full=False)
    shard = dest / "model-00001.safetensors"
    with shard.open("r+b") as handle:  # same size, other bytes
        handle.seek(1000)
        handle.write(b"\0" * 16)
    (dest / "stray.bin").write_bytes(b"x")
    repaired = tool.pull(dest, manifest, [url], full=False)
    assert sorted(repaired["repaired"]) == ["model-00001.safetensors", "stray.bin"]
    assert repaired["bytes_received"] >= 3 << 20
    assert shard.read_bytes() == (source / "model-00001.safetensors").read_bytes()
    assert not (dest / "stray.bin").exists()


def test_a_silent_change_with_the_old_mtime_is_caught_by_a_full_check(served, tmp_path):
    tool, source, manifest, url = served
    dest = tmp_path / "dest"
    tool.pull(dest, manifest, [url], full=False)
    config = dest / "config.json"
    stat = config.stat()
    config.write_text('{"model_type": "qwen3_omni_moX"}')  # same size
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert tool.pull(dest, manifest, [url], full=False)["repaired"] == []  # quick: size and mtime as recorded
    assert tool.pull(dest, manifest, [url], full=True)["repaired"] == ["config.json"]
    assert config.read_text() == (source / "config.json").read_text()


def test_a_dead_parent_falls_back_to_the_next_source(served, tmp_path):
    tool, _unused, manifest, url = served
    dead = f"rsync://127.0.0.1:{free_port()}/model"
    result = tool.pull(tmp_path / "dest", manifest, [dead, url], full=False)
    assert result["source"] == url and len(result["fallbacks"]) == 1 and dead in result["fallbacks"][0]


def test_a_source_that_serves_other_bytes_fails_and_keeps_nothing_of_them(served, tmp_path, capsys):
    tool, source, manifest, url = served
    (source / "config.json").write_text('{"model_type": "tampered!!!!!!!"}')
    with pytest.raises(SystemExit) as exited:
        tool.pull(tmp_path / "dest", manifest, [url], full=False)
    assert exited.value.code == 2
    assert "could not be pulled" in capsys.readouterr().err
    assert not (tmp_path / "dest" / "config.json").exists()


def test_check_sums_the_missing_bytes_per_filesystem_and_refuses_what_does_not_fit(tmp_path, monkeypatch):
    tool = load()
    (tmp_path / "have").mkdir()
    (tmp_path / "have" / "a").write_bytes(b"12345")
    fits = tool.check([{"id": "x", "dest": str(tmp_path / "have"), "files": {"a": 5, "b": 10}},
                       {"id": "y", "dest": str(tmp_path / "new" / "deeper"), "files": {"c": 7}}])
    assert fits["fits"] and fits["need_bytes"] == 17
    huge = tool.check([{"id": "model", "dest": str(tmp_path / "m"), "files": {"w": 1 << 60}}])
    assert not huge["fits"] and "model need" in huge["short"][0]
    monkeypatch.setenv("ARTIFACT_SIZES", json.dumps([{"id": "x", "dest": str(tmp_path / "have"), "files": {"a": 5}}]))
    assert tool.main(["check"]) == 0


def test_status_says_whole_only_for_what_its_last_check_recorded_unchanged(served, tmp_path):
    tool, _unused, manifest, url = served
    dest = tmp_path / "dest"
    assert tool.status([(dest, manifest)]) == {"whole": {"model": False}}  # nothing there yet
    tool.pull(dest, manifest, [url], full=False)
    assert tool.status([(dest, manifest)]) == {"whole": {"model": True}}
    (dest / "config.json").write_text('{"model_type": "changed"}')
    assert tool.status([(dest, manifest)]) == {"whole": {"model": False}}
    tool.pull(dest, manifest, [url], full=False)
    (dest / "stray").write_text("x")
    assert tool.status([(dest, manifest)]) == {"whole": {"model": False}}
