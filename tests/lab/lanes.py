"""The lab's modules in lanes side by side: `make lab-test`, and so `make test`.

    lanes.py [--lanes N] [--first COMMAND] [--after FILE] -- PYTEST [ARG...]

A deploy keeps about one of CI's two cores busy and the modules wait on their machines much of the rest, so
two labs at once finish sooner than one after the other. Which module takes how long changes with the load
beside it, so no lane is given a fixed list: each lane, when it is free, takes the first module of MODULES it
may run (the longest first, so that none of them starts last):
* lane a runs in this machine's network namespace, first COMMAND if one is given, and it alone has a route out: a
  module that installs from the package index runs there, and lane a takes those before any other (a long module
  taken first would leave them, and so the whole run, waiting for it);
* lanes b, c... are labs of their own in network namespaces of their own (tests/lab/lane.py: the same machine
  names and addresses, no route out), so before each module they run tests/lab/warm.py for the Debian releases
  that module boots: it waits for the caches those need (the copy `make test` started fills them) and no
  longer (the first module need not wait for the real engine's 4 GB set, which only one module installs);
* a module that needs what the checks chain leaves (the controller's engine venv and the model config that
  conformance makes, and the disk that its other engines free on CI) starts only once FILE exists.
Each module runs as `PYTEST MODULE`; its output is shown whole when it ends, under a line with its lane and
times, and a summary closes. Every test module of tests/lab must be in MODULES: one that is not is refused.
The exit status is 1 when COMMAND or a module failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Module:
    name: str
    network: bool = False  # installs from the package index: lane a only
    after_checks: bool = False  # reads what the checks chain leaves: starts once --after's file exists
    releases: tuple[str, ...] = ("bookworm",)  # the Debian releases of the machines it boots (warm.py --releases)


# Longest first. Minutes in two lanes beside the checks chain (clean clone of bba174b, record/benchmarks-history.md):
# test_faults 28, test_lab 12 (its tarball test installs ansible-core from the index), test_multihost 12,
# test_security 8.5, test_real_engine about 7 (conformance's engine venv and model config), test_footprint 5.5,
# test_artifacts 3, test_sandbox_devices under 1.
MODULES = (
    Module("test_faults.py"),
    Module("test_lab.py", network=True, releases=("bookworm", "trixie")),
    Module("test_multihost.py", releases=("bookworm", "trixie")),
    Module("test_security.py"),
    Module("test_real_engine.py", after_checks=True, releases=("bookworm", "trixie")),
    Module("test_footprint.py"),
    Module("test_artifacts.py"),
    Module("test_sandbox_devices.py", releases=("bookworm", "trixie", "bullseye")),
)


class Result(NamedTuple):
    lane: str
    what: str
    status: int
    begin: float
    end: float


class Board:
    """The modules not yet taken, and what the lanes print (one lane's output at a time)."""

    def __init__(self, modules: list[Module], after: Path | None):
        self.pending = list(modules)
        self.after = after
        self.lock = threading.Lock()
        self.start = time.monotonic()
        self.results: list[Result] = []

    def clock(self, moment: float | None = None) -> str:
        seconds = int((time.monotonic() if moment is None else moment) - self.start)
        return f"+{seconds // 60}:{seconds % 60:02d}"

    def take(self, lane: str) -> Module | None:
        """The first pending module this lane may run now; None when none is left for it. Waits while the
        only ones left for it wait for the checks chain (saying so once)."""
        said = False
        while True:
            with self.lock:
                mine = [module for module in self.pending if lane == "a" or not module.network]
                if lane == "a":  # what no other lane may run goes first: lane a is the only one with a route out
                    mine.sort(key=lambda module: not module.network)
                ready = [module for module in mine
                         if not module.after_checks or self.after is None or self.after.exists()]
                if ready:
                    self.pending.remove(ready[0])
                    return ready[0]
                if not mine:
                    return None
                if not said:
                    print(f"== {self.clock()} lab lane {lane}: waiting for the checks chain to end ({self.after}) "
                          f"before {', '.join(module.name for module in mine)}", flush=True)
                    said = True
            time.sleep(5)

    def say(self, text: str) -> None:
        with self.lock:
            print(text, flush=True)

    def run(self, lane: str, what: str, argv: list[str]) -> int:
        begin = time.monotonic()
        self.say(f"== {self.clock(begin)} lab lane {lane}: {what} started")
        with tempfile.TemporaryFile("w+") as log:
            status = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
            end = time.monotonic()
            log.seek(0)
            with self.lock:
                verdict = "passed" if status == 0 else f"FAILED (exit {status})"
                print(f"== {self.clock(end)} lab lane {lane}: {what} {verdict} in {minutes(end - begin)}, "
                      f"started at {self.clock(begin)}; its output:", flush=True)
                for line in log:
                    sys.stdout.write(line)
                sys.stdout.flush()
                self.results.append(Result(lane, what, status, begin, end))
        return status


def minutes(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def lane_worker(board: Board, lane: str, first: str | None, pytest: list[str]) -> None:
    if lane == "a" and first:
        board.run(lane, first, ["sh", "-c", first])
    while (module := board.take(lane)) is not None:
        argv = [*pytest, str(HERE / module.name)]
        if lane != "a":
            # No route out of this lane: what the module installs must be in the cache first. warm.py (run here, in
            # this machine's network) waits for the copy `make test` started, or fills what is missing; a cache it
            # could not fill fails the module that needs it. Seconds when everything is there already.
            releases = ",".join(module.releases)
            board.run(lane, f"tests/lab/warm.py --releases {releases}",
                      [sys.executable, str(HERE / "warm.py"), "--releases", releases])
            argv = [sys.executable, str(HERE / "lane.py"), lane, "--", *argv]
        board.run(lane, f"tests/lab/{module.name}", argv)


def unknown_modules() -> list[str]:
    listed = {module.name for module in MODULES}
    return sorted(path.name for path in HERE.glob("test_*.py") if path.name not in listed)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lanes.py", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--lanes", type=int, default=2, choices=range(1, 5), metavar="N")
    parser.add_argument("--first", help="what lane a runs before its first module (a shell command)")
    parser.add_argument("--after", type=Path, help="modules marked after_checks start once this file exists")
    parser.add_argument("pytest", nargs=argparse.REMAINDER, help="-- then the pytest command line")
    args = parser.parse_args(argv)
    pytest = args.pytest[1:] if args.pytest[:1] == ["--"] else args.pytest
    if not pytest:
        parser.error("give the pytest command line after --")
    if missing := unknown_modules():
        parser.error(f"{', '.join(missing)} in tests/lab is not in MODULES (tests/lab/lanes.py): add it, "
                     "with what it needs (network, after_checks), where its length puts it")
    board = Board(list(MODULES), args.after)
    names = "abcd"[:args.lanes]
    print(f"== lab lanes {', '.join(names)}: {len(MODULES)} modules, longest first; "
          f"pytest: {shlex.join(pytest)}" + (f"; after the checks chain: {args.after}" if args.after else ""),
          flush=True)
    workers = [threading.Thread(target=lane_worker, args=(board, lane, args.first, pytest)) for lane in names]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(f"== lab lanes, {board.clock()} in all:")
    for result in board.results:
        print(f"   lane {result.lane}  {board.clock(result.begin):>7} to {board.clock(result.end):>7}  "
              f"{minutes(result.end - result.begin):>6}  "
              f"{'ok' if result.status == 0 else f'FAILED ({result.status})':12} {result.what}")
    taken = {result.what for result in board.results}
    left = [module.name for module in MODULES if f"tests/lab/{module.name}" not in taken]
    if left:
        print(f"   not run: {', '.join(left)}")
    # warm.py's failure fails nothing by itself: a module that needed what it could not fill fails.
    failed = any(result.status for result in board.results if not result.what.startswith("tests/lab/warm.py")) \
        or bool(left)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
