"""Fill one wheel set on the controller from the collection's locks, for the hosts' platform (not this one's).

    python wheelhouse.py OUT_DIR PYTHON MACHINE ABI PLATFORMS LOCK [LOCK ...]

Run by the artifacts role with Ansible's own Python (it needs pip, nothing else; any OS and any
Python 3.8+ will do). For each lock (data/locks/<name>.txt):

* every pin with a wheel for the target is downloaded with ``pip download --only-binary=:all:
  --platform ... --python-version ... --require-hashes``: pip refuses a file whose sha256 is not the
  lock's;
* the pins the lock marks ``# from source:`` (PyPI has no wheel for the target) are downloaded as
  sdists, hash-checked the same way, and built here into wheels, which must be pure Python
  (``none-any``): a compiled wheel built on the controller would not fit the hosts;
* ``OUT_DIR/<name>.host.txt`` is the lock the hosts install with (``--require-hashes``): the lock's
  own hashes, and for a built wheel the sha256 of the file built here from the verified sdist.

``OUT_DIR/.complete`` marks a finished set; it is filled in ``OUT_DIR.building`` and renamed, so an
interrupted run leaves nothing half-made under the final name. One run fills a set at a time (an exclusive
lock on ``OUT_DIR.lock``): a second run for the same set, from another playbook on this controller or a
warm-up beside a deploy, waits for the first and then finds the set complete, instead of removing the
first one's half-filled directory. Prints one line per step.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FROM_SOURCE = "# from source: "


def parse_lock(text: str) -> tuple[dict[str, list[str]], list[str]]:
    """(pin -> its hashes, pins to build from source) of a lock file."""
    entries: dict[str, list[str]] = {}
    from_source: list[str] = []
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if raw.startswith(FROM_SOURCE):
            from_source = raw[len(FROM_SOURCE):].split()
        if not line or line.startswith("#"):
            continue
        if not raw[0].isspace():
            current = line.split()[0]
            entries[current] = []
        for part in line.replace("\\", " ").split():
            if part.startswith("--hash=") and current:
                entries[current].append(part[len("--hash="):])
    return entries, from_source


def requirements(entries: dict[str, list[str]], pins: list[str]) -> str:
    return "".join(f"{pin} " + " ".join(f"--hash={h}" for h in entries[pin]) + "\n" for pin in pins)


def pip(python: str, *args: str) -> None:
    result = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"pip {args[0]} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fill(out: Path, target: dict, locks: list[Path]) -> None:
    python = sys.executable
    platforms = [arg for p in target["platforms"] for arg in ("--platform", p)]
    for lock in locks:
        entries, from_source = parse_lock(lock.read_text())
        binary = [pin for pin in entries if pin not in from_source]
        with tempfile.TemporaryDirectory() as work:
            wanted = Path(work) / "binary.txt"
            wanted.write_text(requirements(entries, binary))
            print(f"{lock.stem}: downloading {len(binary)} wheels for CPython {target['python']} {target['machine']}",
                  flush=True)
            pip(python, "download", "--quiet", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:",
                "--require-hashes", *platforms, "--python-version", target["python"], "--implementation", "cp",
                "--abi", target["abi"], "--dest", str(out), "--requirement", str(wanted))
            built = {}
            for pin in from_source:
                sources = Path(work) / "sdist"
                sources.mkdir(exist_ok=True)
                one = Path(work) / "source.txt"
                one.write_text(requirements(entries, [pin]))
                pip(python, "download", "--quiet", "--disable-pip-version-check", "--no-deps", "--no-binary=:all:",
                    "--require-hashes", "--dest", str(sources), "--requirement", str(one))
                (sdist,) = [p for p in sources.iterdir() if p.name.lower().startswith(pin.split("==")[0].replace("-", "_"))
                            or p.name.lower().startswith(pin.split("==")[0])]
                wheels = Path(work) / "built"
                pip(python, "wheel", "--quiet", "--disable-pip-version-check", "--no-deps", "--wheel-dir", str(wheels),
                    str(sdist))
                (wheel,) = list(wheels.glob("*.whl"))
                if not wheel.name.endswith("-none-any.whl"):
                    sys.exit(f"{pin} has no wheel for the hosts and builds into {wheel.name}, which is not pure Python: "
                             "it cannot be built here for another platform")
                shutil.move(str(wheel), out / wheel.name)
                built[pin] = sha256(out / wheel.name)
                print(f"{lock.stem}: built {wheel.name} from its verified sdist", flush=True)
                sdist.unlink()
        host = {pin: ([f"sha256:{built[pin]}"] if pin in built else hashes) for pin, hashes in entries.items()}
        (out / f"{lock.stem}.host.txt").write_text(
            f"# {lock.name} for the hosts: built wheels carry the hash of the file built from the verified sdist.\n"
            + requirements(host, list(host)))


def main(argv: list[str]) -> int:
    out, python, machine, abi, platforms, *locks = argv
    final = Path(out)
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.with_name(final.name + ".lock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        return fill_once(final, {"python": python, "machine": machine, "abi": abi, "platforms": platforms.split(",")},
                         [Path(lock) for lock in locks])


def fill_once(final: Path, target: dict, locks: list[Path]) -> int:
    if (final / ".complete").is_file():
        print(f"{final.name}: complete already", flush=True)
        return 0
    building = final.with_name(final.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    fill(building, target, locks)
    size = sum(p.stat().st_size for p in building.iterdir())
    (building / ".complete").write_text(f"{size}\n")
    shutil.rmtree(final, ignore_errors=True)
    building.rename(final)
    print(f"{final.name}: {len(list(final.glob('*.whl')))} wheels, {size / 1e6:.0f} MB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
