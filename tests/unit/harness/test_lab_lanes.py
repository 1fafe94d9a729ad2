"""tests/lab/lanes.py, the lab's lanes: which lane may take which module when, and a table that keeps up with the
lab's modules (every module listed, the Debian releases each boots named, so that a lane without a route out has
their caches filled first)."""

from __future__ import annotations

import importlib
import re
import sys
import threading

from unitlib import REPO


def _lab_module(name: str):
    """A module of tests/lab (not a package), imported without leaving tests/lab on the path."""
    sys.path.insert(0, str(REPO / "tests" / "lab"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "tests" / "lab"))


lab = _lab_module("lab")
lanes = _lab_module("lanes")


def test_every_lab_module_is_in_the_table_once_with_releases_the_lab_boots():
    assert lanes.unknown_modules() == []
    names = [module.name for module in lanes.MODULES]
    assert len(names) == len(set(names)) and all((REPO / "tests" / "lab" / name).is_file() for name in names)
    for module in lanes.MODULES:
        assert module.releases and set(module.releases) <= set(lab.RELEASES), module


def test_a_module_that_boots_another_release_names_it():
    """A lane without a route out fills only the named releases' rootfs and wheel sets before the module
    (warm.py --releases): a release the module's source spells and the table does not name would be missing."""
    for module in lanes.MODULES:
        source = (REPO / "tests" / "lab" / module.name).read_text()
        spelled = {release for release in lab.RELEASES if re.search(rf"\b{release}\b", source)}
        assert spelled <= {"bookworm", *module.releases}, (module.name, sorted(spelled - set(module.releases)))


def test_lane_b_never_takes_a_module_that_needs_the_network_and_takes_the_longest_first(tmp_path):
    board = lanes.Board([lanes.Module("net.py", network=True), lanes.Module("long.py"), lanes.Module("short.py")],
                        tmp_path / "checks.done")
    assert board.take("b").name == "long.py" and board.take("b").name == "short.py"
    assert board.take("b") is None  # only lane a may run net.py
    assert board.take("a").name == "net.py" and board.take("a") is None


def test_lane_a_takes_what_only_it_may_run_before_a_longer_module(tmp_path):
    """Without it lane a takes the longest module first and the network module waits for its end: the run's tail."""
    board = lanes.Board([lanes.Module("long.py"), lanes.Module("net.py", network=True), lanes.Module("short.py")],
                        tmp_path / "checks.done")
    assert [board.take("a").name for _round in range(3)] == ["net.py", "long.py", "short.py"]


def test_a_module_after_the_checks_waits_for_their_file(tmp_path, monkeypatch, capsys):
    gate = tmp_path / "checks.done"
    board = lanes.Board([lanes.Module("engine.py", after_checks=True)], gate)
    naps = []

    def sleep(seconds):
        naps.append(seconds)
        if len(naps) == 3:
            gate.touch()  # the checks chain ends while the lane waits

    monkeypatch.setattr(lanes.time, "sleep", sleep)
    assert board.take("b").name == "engine.py" and len(naps) == 3
    assert capsys.readouterr().out.count("waiting for the checks chain") == 1  # said once, not each look
    # Without a gate (make lab-test alone) nothing waits.
    assert lanes.Board([lanes.Module("engine.py", after_checks=True)], None).take("a").name == "engine.py"


def test_two_lanes_take_each_module_once(tmp_path):
    modules = [lanes.Module(f"m{index}.py") for index in range(40)]
    board = lanes.Board(modules, None)
    taken: dict[str, list[str]] = {"a": [], "b": []}

    def lane(name):
        while (module := board.take(name)) is not None:
            taken[name].append(module.name)

    workers = [threading.Thread(target=lane, args=(name,)) for name in taken]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(taken["a"] + taken["b"]) == sorted(module.name for module in modules)
