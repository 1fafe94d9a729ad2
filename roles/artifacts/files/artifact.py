# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Manifests, checks and pulls of one artifact directory (a wheel set, a model's files).

    artifact.py manifest DIR ID OUT            controller: sha256 and size of every file -> OUT (JSON)
    artifact.py status DEST MANIFEST [...]     host: which artifacts are whole as last checked (no hashing)
    artifact.py check                          host: the bytes the pulls need and the free space for them
                                               (sizes from ARTIFACT_SIZES: nothing is copied to the host)
    artifact.py estimate                       controller, --check: what each artifact of ARTIFACT_ESTIMATE
                                               would take, read only (stat, no hashing, no download)
    artifact.py pull DEST MANIFEST URL [URL..] host: make DEST exactly the manifest, from the first URL that works

Standard library only (controller: Ansible's Python; hosts: /usr/bin/python3). Why it is built so:

* The manifest is the controller's: a host pulls from a peer that pulled it earlier, and keeps only
  files whose sha256 is the manifest's. A peer can slow a deploy down, never change what it installs.
* Re-runs are cheap: ``<manifest>.verified`` records each verified file's size and mtime; a file
  whose size or mtime changed since (written to, truncated, replaced) is hashed again, and a file
  that fails is deleted and pulled again. ``--full`` hashes everything (``artifacts_verify: full``).
  The controller's manifest reuses earlier hashes the same way, so a 70 GB model is hashed once.
* ``pull`` transfers nothing when DEST already matches, checks the free space before it transfers,
  resumes partial files (``--partial-dir``), and falls back to the next URL (the controller) when a
  peer fails. It prints one JSON line: bytes received, from where, how long, what was repaired.
  Progress goes to PROGRESS_FILE (environment) for the role to show.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

CHUNK = 8 << 20
PARTIAL = ".rsync-partial"
MARGIN = 1.02  # free space wanted beyond the missing bytes (filesystem overhead)


def fail(message: str) -> None:
    print(f"artifact: {message}", file=sys.stderr)
    sys.exit(2)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def walk(root: Path) -> dict[str, Path]:
    """Every regular file under root (symlinks followed, as rsync --copy-links sends them), by relative path."""
    found = {}
    for directory, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = [d for d in dirs if d != PARTIAL]
        for name in files:
            path = Path(directory, name)
            if path.is_file():
                found[path.relative_to(root).as_posix()] = path
    return found


def load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def make_manifest(root: Path, artifact_id: str, out: Path) -> dict:
    if not root.is_dir():
        fail(f"{root} is not a directory")
    before = load(out).get("files", {})
    files = {}
    for rel, path in sorted(walk(root).items()):
        stat = path.stat()
        known = before.get(rel)
        if known and known["size"] == stat.st_size and known.get("mtime_ns") == stat.st_mtime_ns:
            files[rel] = known
        else:
            files[rel] = {"size": stat.st_size, "sha256": sha256(path), "mtime_ns": stat.st_mtime_ns}
    manifest = {"schema": 1, "id": artifact_id, "files": files, "bytes": sum(f["size"] for f in files.values())}
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    partial.replace(out)
    return {"id": artifact_id, "files": len(files), "bytes": manifest["bytes"]}


def inspect(dest: Path, manifest: dict, stamp: dict, full: bool) -> dict:
    """What DEST lacks: missing, bad (hash or size) and extra files; verified keeps the stamp of the good ones."""
    present = walk(dest) if dest.is_dir() else {}
    result = {"missing": [], "bad": [], "extra": sorted(set(present) - set(manifest["files"])), "verified": {}}
    for rel, want in manifest["files"].items():
        path = present.get(rel)
        if path is None:
            result["missing"].append(rel)
            continue
        stat = path.stat()
        seen = [stat.st_size, stat.st_mtime_ns]
        if stat.st_size != want["size"]:
            result["bad"].append(rel)
        elif not full and stamp.get(rel) == [*seen, want["sha256"]]:
            result["verified"][rel] = stamp[rel]
        elif sha256(path) == want["sha256"]:
            result["verified"][rel] = [*seen, want["sha256"]]
        else:
            result["bad"].append(rel)
    return result


def missing_bytes(manifest: dict, state: dict) -> int:
    return sum(manifest["files"][rel]["size"] for rel in state["missing"] + state["bad"])


def check_space(dest: Path, need: int) -> dict:
    probe = dest
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    return {"need_bytes": need, "free_bytes": free, "checked": str(probe), "fits": free >= need * MARGIN}


def repair(dest: Path, state: dict) -> list[str]:
    """Delete what a pull must replace: corrupt files and files the manifest does not have."""
    for rel in state["bad"] + state["extra"]:
        (dest / rel).unlink(missing_ok=True)
    return state["bad"] + state["extra"]


def rsync(url: str, dest: Path) -> tuple[int, int, str]:
    """(exit code, bytes received, last error) of one pull from an rsync daemon. Its progress and
    statistics go to PROGRESS_FILE (the role shows it), next to DEST without one."""
    progress = Path(os.environ.get("PROGRESS_FILE") or f"{dest}.progress")
    argv = ["rsync", "--recursive", "--times", "--copy-links", "--delete", "--chmod=D0755,F0644",
            f"--partial-dir={PARTIAL}", "--timeout=600", "--contimeout=20", "--stats", "--info=progress2",
            url.rstrip("/") + "/", str(dest) + "/"]
    with progress.open("w") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, text=True, check=False)
    received = re.search(r"Total bytes received: ([\d,]+)", progress.read_text(errors="replace"))
    error = " / ".join(line.strip() for line in done.stderr.strip().splitlines()[-2:])
    return done.returncode, int(received.group(1).replace(",", "")) if received else 0, error[-500:]


def note(text: str) -> None:
    """What the pull is doing, for the role's progress lines (rsync's own progress follows)."""
    if os.environ.get("PROGRESS_FILE"):
        Path(os.environ["PROGRESS_FILE"]).write_text(text + "\n")


def pull(dest: Path, manifest_path: Path, urls: list[str], full: bool) -> dict:
    manifest, stamp_path = load(manifest_path), manifest_path.with_suffix(".verified")
    if not manifest.get("files"):
        fail(f"{manifest_path} is not a manifest")
    started, received, used, errors = time.monotonic(), 0, None, []
    note(f"checking {len(manifest['files'])} files ({manifest['bytes'] / 1e9:.2f} GB) against the manifest")
    state = inspect(dest, manifest, load(stamp_path), full)
    repaired = repair(dest, state)
    if state["missing"] or state["bad"]:
        space = check_space(dest, missing_bytes(manifest, state))
        if not space["fits"]:
            fail(f"{space['free_bytes'] / 2**30:.1f} GiB free under {space['checked']}, {manifest['id']} needs "
                 f"{space['need_bytes'] / 2**30:.1f} GiB more: free space there, or move it elsewhere")
        dest.mkdir(parents=True, exist_ok=True)
        for url in urls:
            note(f"pulling {missing_bytes(manifest, state) / 1e9:.2f} GB from {url}")
            code, got, error = rsync(url, dest)
            received += got
            note(f"checking what {url} sent")
            state = inspect(dest, manifest, state["verified"], full)
            if code == 0 and not (state["missing"] or state["bad"] or state["extra"]):
                used = url
                break
            errors.append(f"{url}: rsync exit {code}, {len(state['missing'])} missing, {len(state['bad'])} bad"
                          + (f" ({error})" if error else ""))
            repair(dest, state)
        else:
            fail(f"{manifest['id']} could not be pulled into {dest}: " + "; ".join(errors))
    stamp_path.write_text(json.dumps(state["verified"], sort_keys=True))
    seconds = round(time.monotonic() - started, 1)
    result = {"id": manifest["id"], "bytes_received": received, "source": used, "repaired": repaired,
              "files": len(manifest["files"]), "bytes": manifest["bytes"], "fallbacks": errors, "seconds": seconds}
    return {**result, "line": summary(result)}


def summary(result: dict) -> str:
    """One line for the play's output."""
    if result["source"] is None:
        line = f"{result['id']}: already here, {result['files']} files checked"
    else:
        rate = result["bytes_received"] / max(result["seconds"], 0.1) / 1e6
        line = (f"{result['id']}: {result['bytes_received'] / 1e6:.1f} MB received from {result['source']} "
                f"in {result['seconds']} s ({rate:.0f} MB/s)")
    if result["repaired"]:
        line += f"; replaced {len(result['repaired'])} damaged or stray file(s): {', '.join(result['repaired'][:5])}"
    if result["fallbacks"]:
        line += f"; fell back after: {'; '.join(result['fallbacks'])}"
    return line


def check(wanted: list[dict]) -> dict:
    """Size only (no hashing, no change): per filesystem, the bytes the pulls need and whether they fit.

    ``wanted``: [{id, dest, files: {relative path: size}}], from the environment (ARTIFACT_SIZES)."""
    filesystems: dict[int, dict] = {}
    for artifact in wanted:
        dest = Path(artifact["dest"])
        present = walk(dest) if dest.is_dir() else {}
        need = sum(size for rel, size in artifact["files"].items()
                   if rel not in present or present[rel].stat().st_size != size)
        probe = dest
        while not probe.exists():
            probe = probe.parent
        entry = filesystems.setdefault(probe.stat().st_dev, {"need_bytes": 0, "ids": [], "probe": probe})
        entry["need_bytes"] += need
        entry["ids"].append(artifact["id"])
    short = []
    for entry in filesystems.values():
        space = check_space(entry["probe"], entry["need_bytes"])
        if not space["fits"]:
            short.append(f"{space['free_bytes'] / 2**30:.1f} GiB free under {space['checked']}, "
                         f"{' and '.join(entry['ids'])} need {space['need_bytes'] / 2**30:.1f} GiB more")
    return {"fits": not short, "short": short,
            "need_bytes": sum(entry["need_bytes"] for entry in filesystems.values())}


def status(pairs: list[tuple[Path, Path]]) -> dict:
    """Per artifact, whole as last verified: every file there with the size and mtime its check recorded,
    and nothing else (stat only). Anything else, or --full, means a pull runs (and hashes what it must)."""
    whole = {}
    for dest, manifest_path in pairs:
        manifest, stamp = load(manifest_path), load(manifest_path.with_suffix(".verified"))
        present = walk(dest) if dest.is_dir() else {}
        files = manifest.get("files", {})
        whole[manifest.get("id", str(dest))] = bool(files) and set(present) == set(files) and all(
            stamp.get(rel) == [present[rel].stat().st_size, present[rel].stat().st_mtime_ns, want["sha256"]]
            for rel, want in files.items())
    return {"whole": whole}


def lock_pins(paths: list[str]) -> int:
    """How many packages the locks pin (a lock pins each wheel's hashes, not its size)."""
    pins = set()
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        pins.update(line.split()[0] for line in text.splitlines() if line and not line[0].isspace()
                    and not line.startswith("#") and "==" in line.split()[0])
    return len(pins)


def estimate(artifacts: list[dict]) -> dict:
    """--check on the controller: per artifact, whether its controller copy is there and its bytes, where
    known without downloading anything. Read only: stat and the files already there, never a hash.

    ``artifacts``: [{id, kind, dir, manifest, locks: [lock files]}] (kind wheels, or model from a directory;
    a hub model is model_fetch.py --dry-run's)."""
    found = {}
    for artifact in artifacts:
        root, manifest = Path(artifact["dir"]), load(Path(artifact["manifest"]))
        present = walk(root) if root.is_dir() else {}
        here = sum(path.stat().st_size for path in present.values())
        if artifact["kind"] == "wheels":
            pins = lock_pins(artifact.get("locks") or [])
            if (root / ".complete").is_file():
                entry = {"bytes": here, "files": len(present), "state": "filled on the controller"}
            else:
                entry = {"bytes": None, "files": pins,
                         "state": f"not filled on the controller: would download {pins} locked wheel(s) from the "
                                  "package index; bytes unknown (the locks pin hashes, not sizes)"
                                  + (f"; {len(present)} file(s), {here} bytes, already there" if present else "")}
        elif root.is_dir():
            entry = {"bytes": here, "files": len(present), "state": f"read from {root}"}
        else:
            entry = {"bytes": None, "files": None, "state": f"{root} is not a directory on the controller"}
        if manifest.get("files") and entry["bytes"] is None:
            entry["manifest_bytes"] = manifest.get("bytes")
        found[artifact["id"]] = entry
    return {"artifacts": found}


def main(argv: list[str]) -> int:
    full = "--full" in argv
    args = [a for a in argv if a != "--full"]
    if len(args) == 4 and args[0] == "manifest":
        result = make_manifest(Path(args[1]), args[2], Path(args[3]))
    elif len(args) >= 3 and len(args) % 2 == 1 and args[0] == "status":
        result = status([(Path(args[i]), Path(args[i + 1])) for i in range(1, len(args), 2)])
    elif len(args) == 1 and args[0] == "check":
        result = check(json.loads(os.environ.get("ARTIFACT_SIZES", "[]")))
    elif len(args) == 1 and args[0] == "estimate":
        result = estimate(json.loads(os.environ.get("ARTIFACT_ESTIMATE", "[]")))
    elif len(args) >= 4 and args[0] == "pull":
        result = pull(Path(args[1]), Path(args[2]), args[3:], full)
    else:
        fail("usage: artifact.py manifest DIR ID OUT | status DEST MANIFEST [...] | check"
             " | estimate | pull DEST MANIFEST URL [URL ...] [--full]")
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
