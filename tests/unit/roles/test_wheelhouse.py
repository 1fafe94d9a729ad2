"""roles/artifacts/files/wheelhouse.py: one filler per wheel set at a time (the download itself is
tests/conformance/test_platform_wheel_sets.py's)."""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "roles" / "artifacts" / "files" / "wheelhouse.py"


def load():
    spec = importlib.util.spec_from_file_location("wheelhouse_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_runs_for_one_set_fill_it_once_and_both_find_it_complete(tmp_path, capsys):
    wheelhouse = load()
    fills = []

    def slow_fill(out: Path, target: dict, locks: list) -> None:
        fills.append(out)
        (out / "a-1.0-py3-none-any.whl").write_bytes(b"wheel")
        time.sleep(0.5)  # the other run starts meanwhile: without the lock it removed this directory
        (out / "router.host.txt").write_text("a==1.0 --hash=sha256:00\n")

    wheelhouse.fill = slow_fill
    final = tmp_path / "wheelhouse" / "router-abc"
    argv = [str(final), "3.12", "x86_64", "cp312", "manylinux_2_28_x86_64", str(tmp_path / "router.txt")]
    results = []
    runs = [threading.Thread(target=lambda: results.append(wheelhouse.main(argv)), name=name) for name in ("first", "second")]
    for run in runs:
        run.start()
        time.sleep(0.1)
    for run in runs:
        run.join(timeout=10)
    assert results == [0, 0]
    assert len(fills) == 1, fills
    assert sorted(path.name for path in final.iterdir()) == [".complete", "a-1.0-py3-none-any.whl", "router.host.txt"]
    assert not final.with_name("router-abc.building").exists()
    assert "router-abc: complete already" in capsys.readouterr().out


def test_a_set_left_half_filled_by_a_dead_run_is_filled_again(tmp_path):
    wheelhouse = load()
    final = tmp_path / "set"
    stale = final.with_name("set.building")
    stale.mkdir()
    (stale / "partial.whl").write_bytes(b"half")
    wheelhouse.fill = lambda out, target, locks: (out / "b-2.0-py3-none-any.whl").write_bytes(b"wheel")
    assert wheelhouse.main([str(final), "3.11", "x86_64", "cp311", "any", str(tmp_path / "lock.txt")]) == 0
    assert sorted(path.name for path in final.iterdir()) == [".complete", "b-2.0-py3-none-any.whl"]
    assert not stale.exists()
