"""converge_state's host side: the snapshot, what drift it names, the record, and the verdict."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

from ansible_collections.vllm_omni.serve.plugins.module_utils import _converge
from ansible_collections.vllm_omni.serve.plugins.module_utils._converge import (
    drift,
    read_record,
    remove_record,
    snapshot,
    unit_states,
    venv_state,
    verdict,
    write_record,
)


def systemctl(stdout: str, returncode: int = 0):
    def run(argv, **_kwargs):
        assert argv[:2] == ["systemctl", "show"] or argv[:2] == ["nft", "list"], argv
        return subprocess.CompletedProcess(argv, returncode, stdout=stdout, stderr="")
    return run


UNITS = ("Id=vllm-omni@omni0.service\nLoadState=loaded\nUnitFileState=enabled\nActiveState=active\n\n"
         "Id=vllm-omni-router.service\nLoadState=loaded\nUnitFileState=enabled\nActiveState=failed\n\n"
         "Id=gone.service\nLoadState=not-found\nUnitFileState=\nActiveState=inactive\n")


def host(tmp_path):
    """A host's deploy in a directory: a config file, its directory, a venv with one package, a model tree."""
    config = tmp_path / "etc" / "omni0"
    config.mkdir(parents=True)
    (config / "engine.env").write_text("VLLM_PORT=20000\n")
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "pkg-1.0.dist-info").mkdir(parents=True)
    (site / "pkg.py").write_text("x = 1\n")
    (site / "pkg-1.0.dist-info" / "RECORD").write_text("pkg.py,sha256=x,6\npkg-1.0.dist-info/RECORD,,\n"
                                                       "../../../bin/tool,sha256=y,3\npkg.cpython-311.pyc,,\n")
    (tmp_path / "venv" / "bin").mkdir()
    (tmp_path / "venv" / "bin" / "python").write_text("#!/bin/sh\n")
    (tmp_path / "venv" / "bin" / "python").chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    sysctl = tmp_path / "60-mooncake.conf"
    sysctl.write_text("# ours\nnet.core.somaxconn = 4096\n-kernel.nonexistent_setting_for_test = 1\n")
    return {"files": [str(config / "engine.env"), str(tmp_path / "missing.conf")], "directories": [str(config)],
            "units": [], "venvs": [str(tmp_path / "venv")], "trees": [str(model)], "sysctl": str(sysctl),
            "firewall": None, "health": []}


def test_units_read_in_one_call_keep_their_order_and_name_what_is_not_loaded():
    calls = []

    def run(argv, **kwargs):
        calls.append(argv)
        return systemctl(UNITS)(argv, **kwargs)

    states = unit_states(["vllm-omni@omni0.service", "vllm-omni-router.service", "gone.service"], run)
    assert len(calls) == 1
    assert states == {"vllm-omni@omni0.service": "enabled up", "vllm-omni-router.service": "enabled down",
                      "gone.service": "not-found"}
    # Fewer blocks than units (systemctl cut short): the rest are unknown, never paired with another unit's state.
    short = unit_states(["a.service", "b.service"], systemctl("Id=a.service\nLoadState=loaded\nUnitFileState=static\n"
                                                              "ActiveState=activating\n"))
    assert short == {"a.service": "static up", "b.service": "unknown"}


def test_a_venv_counts_the_package_files_its_records_list_and_what_is_missing(tmp_path):
    look = host(tmp_path)
    assert venv_state(look["venvs"][0]) == "2 files, 0 missing"  # bytecode and files outside site-packages skipped
    (tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "pkg.py").unlink()
    assert venv_state(look["venvs"][0]) == "2 files, 1 missing"
    assert venv_state(str(tmp_path / "nowhere")) == "absent"


def test_the_same_host_gives_the_same_snapshot_and_each_change_is_named(tmp_path):
    look = host(tmp_path)
    before = snapshot(look)
    assert before == snapshot(look)
    assert before["files"][look["files"][1]] == "absent"
    assert before["sysctl"]["net.core.somaxconn"] == " ".join(Path("/proc/sys/net/core/somaxconn").read_text().split())
    assert before["sysctl"]["kernel.nonexistent_setting_for_test"] == "absent"
    (tmp_path / "etc" / "omni0" / "engine.env").write_text("VLLM_PORT=20001\n")
    os.chmod(tmp_path / "etc" / "omni0", 0o700)
    (tmp_path / "model" / "extra.safetensors").write_bytes(b"\0" * 10)
    lines = drift(before, snapshot(look))
    assert len(lines) == 3, lines
    assert any(line.startswith(f"files {look['files'][0]}: ") for line in lines)
    assert any(line.startswith(f"directories {look['directories'][0]}: ") and line.endswith(" 0700") for line in lines)
    assert any(line.startswith(f"trees {look['trees'][0]}: 1 entries, 2 bytes") for line in lines)


def test_the_firewall_table_is_compared_without_its_counters():
    table = "table inet vllm_omni {\n  chain input {\n    tcp dport 9000 counter packets {} bytes {} accept\n  }\n}\n"
    quiet, busy = table.replace("{}", "0"), table.replace("{}", "918273")
    assert _converge.nft_state("inet vllm_omni", systemctl(quiet)) == _converge.nft_state("inet vllm_omni", systemctl(busy))
    changed = quiet.replace("9000", "9001")
    assert _converge.nft_state("inet vllm_omni", systemctl(changed)) != _converge.nft_state("inet vllm_omni", systemctl(quiet))
    assert _converge.nft_state("inet vllm_omni", systemctl("", returncode=1)) == "absent"


def test_the_record_is_root_s_alone_written_whole_and_read_back(tmp_path):
    look = host(tmp_path)
    path = str(tmp_path / "state" / "converge.json")
    write_record(path, "d1", look, snapshot(look))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["converge.json"]  # no temporary left
    record = read_record(path)
    assert record["digest"] == "d1" and record["look"] == look
    (tmp_path / "state" / "converge.json").write_text("{not json")
    assert read_record(path) is None
    (tmp_path / "state" / "converge.json").write_text(json.dumps({"version": 0, "digest": "d1"}))
    assert read_record(path) is None  # another record format: as if there were none
    assert remove_record(path) and not remove_record(path)


def test_the_verdict_is_in_sync_only_with_the_same_digest_look_snapshot_and_healthy_services(tmp_path, monkeypatch):
    look = host(tmp_path)
    path = str(tmp_path / "converge.json")
    assert verdict(read_record(path), "d1", look) == {
        "in_sync": False, "reasons": ["no record of a whole deploy that succeeded here"]}
    write_record(path, "d1", look, snapshot(look))
    assert verdict(read_record(path), "d1", look) == {"in_sync": True, "reasons": []}
    assert not verdict(read_record(path), "d2", look)["in_sync"]
    assert verdict(read_record(path), "d1", {**look, "units": ["x.service"]})["reasons"] == [
        "what the plan puts on this host changed"]
    (tmp_path / "etc" / "omni0" / "engine.env").write_text("changed\n")
    seen = verdict(read_record(path), "d1", look)
    assert not seen["in_sync"] and seen["reasons"][0].startswith(f"files {look['files'][0]}: ")
    # A service that does not answer is a reason, whatever the record says.
    write_record(path, "d1", {**look, "health": ["http://127.0.0.1:9/health"]},
                 snapshot({**look, "health": ["http://127.0.0.1:9/health"]}))
    monkeypatch.setattr(_converge, "answer", lambda url, timeout: (None, "connection refused"))
    seen = verdict(read_record(path), "d1", {**look, "health": ["http://127.0.0.1:9/health"]})
    assert seen == {"in_sync": False, "reasons": ["health http://127.0.0.1:9/health: connection refused"]}


def test_many_differences_are_cut_to_a_few_lines_and_a_count(tmp_path):
    files = [tmp_path / f"f{i}" for i in range(12)]
    for path in files:
        path.write_text("a")
    look = {"files": [str(p) for p in files]}
    path = str(tmp_path / "converge.json")
    write_record(path, "d", look, snapshot(look))
    for file in files:
        file.write_text("b")
    reasons = verdict(read_record(path), "d", look)["reasons"]
    assert len(reasons) == 9 and reasons[-1] == "... and 4 more"


def test_the_look_taken_in_the_discovery_call_judges_as_the_check_does(tmp_path, monkeypatch):
    """host_facts takes the look (take_record) and converge_state's action judges it on the controller (judge):
    for every case the check knows, the same verdict as the module's own look, and neither the digest nor the look
    leaves the host, only their fingerprints."""
    look = host(tmp_path)
    path = str(tmp_path / "converge.json")
    taken = _converge.take_record(path)
    assert taken == {"path": path, "record": False}
    assert _converge.judge(taken, "d1", look) == verdict(read_record(path), "d1", look)
    write_record(path, "secret-derived-digest", look, snapshot(look))
    cases = [("secret-derived-digest", look), ("d2", look), ("secret-derived-digest", {**look, "units": ["x.service"]})]
    for digest, planned in cases:
        taken = _converge.take_record(path)
        assert _converge.judge(taken, digest, planned) == verdict(read_record(path), digest, planned), (digest, planned)
        assert "secret-derived-digest" not in json.dumps(taken)
    assert _converge.judge(_converge.take_record(path), "secret-derived-digest", look) == {"in_sync": True, "reasons": []}
    # Drift and a service that does not answer: named the same, cut the same.
    (tmp_path / "etc" / "omni0" / "engine.env").write_text("changed\n")
    write_record(path, "d1", {**look, "health": ["http://127.0.0.1:9/health"]}, read_record(path)["snapshot"])
    monkeypatch.setattr(_converge, "answer", lambda url, timeout: (None, "connection refused"))
    planned = {**look, "health": ["http://127.0.0.1:9/health"]}
    judged = _converge.judge(_converge.take_record(path), "d1", planned)
    assert judged == verdict(read_record(path), "d1", planned) and not judged["in_sync"]
    assert judged["reasons"][0].startswith(f"files {look['files'][0]}: ") and judged["reasons"][-1].startswith("health ")


def test_a_record_the_discovery_cannot_read_leaves_the_look_to_the_check(tmp_path, monkeypatch):
    path = tmp_path / "converge.json"
    write_record(str(path), "d1", {}, snapshot({}))
    real_open = open

    def refusing_open(name, *args, **kwargs):
        if str(name) == str(path):
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refusing_open)
    assert _converge.take_record(str(path)) is None  # not "no record": the check takes its own look
