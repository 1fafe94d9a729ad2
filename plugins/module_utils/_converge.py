# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""One look at everything a deploy put on a host, for the no-op check (the converge_state module's logic).

After a whole deploy succeeds, each host keeps a record: the digest of what the controller deployed from (the
plan, the collection's code, the operator's variables and TLS material) and a snapshot of what the deploy left
there: every planned file's hash, owner and mode, every directory, unit state, venv, artifact tree, the live
kernel settings and the firewall table. The next deploy takes the same snapshot in one module call per host
and compares. Equal digests, an equal snapshot and every health URL answering mean there is nothing to do on
that host. Any difference is named (which file, which unit, what it was and is now).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import subprocess
import tempfile

from ansible_collections.vllm_omni.serve.plugins.module_utils._files import owner_names
from ansible_collections.vllm_omni.serve.plugins.module_utils._health import answer

ABSENT = "absent"
RECORD_VERSION = 1
# A unit that is coming up or reloading at the end of a deploy counts as up; anything else as down.
UP_STATES = ("active", "activating", "reloading")
NFT_COUNTERS = re.compile(r"\s*counter packets \d+ bytes \d+")
DRIFT_SHOWN = 8


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _attributes(status: os.stat_result) -> str:
    owner, group = owner_names(status)
    return f"{owner}:{group} {oct(status.st_mode & 0o7777)[2:].zfill(4)}"


def file_state(path: str) -> str:
    try:
        status = os.stat(path)
        return f"{_sha256(path)} {_attributes(status)}"
    except OSError:
        return ABSENT


def directory_state(path: str) -> str:
    try:
        status = os.stat(path)
    except OSError:
        return ABSENT
    return _attributes(status) if os.path.isdir(path) else "not a directory"


def unit_states(units: list[str], run=subprocess.run) -> dict[str, str]:
    """Each unit's ``UnitFileState`` and up/down, from one ``systemctl show`` for all of them."""
    if not units:
        return {}
    result = run(["systemctl", "show", "-p", "Id,LoadState,UnitFileState,ActiveState", "--", *units],
                 capture_output=True, text=True, check=False)
    blocks = [dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
              for block in result.stdout.strip().split("\n\n")] if result.stdout.strip() else []
    states = {}
    for unit, fields in zip(units, (blocks + [{}] * len(units))[:len(units)], strict=True):
        if fields.get("LoadState") != "loaded":
            states[unit] = fields.get("LoadState") or "unknown"
            continue
        up = "up" if fields.get("ActiveState") in UP_STATES else "down"
        states[unit] = f"{fields.get('UnitFileState') or 'static'} {up}"
    return states


def venv_state(path: str) -> str:
    """Whether the venv's Python is there, and how many of the files its packages' RECORDs list are missing."""
    if not os.access(os.path.join(path, "bin", "python"), os.X_OK):
        return ABSENT
    listed = missing = 0
    for record in glob.glob(os.path.join(path, "lib", "python*", "site-packages", "*.dist-info", "RECORD")):
        site = os.path.dirname(os.path.dirname(record))
        with open(record, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                name = line.rsplit(",", 2)[0]
                if not name or name.startswith("..") or name.endswith(".pyc"):
                    continue  # outside site-packages (scripts), or bytecode that may be compiled later
                listed += 1
                missing += not os.path.lexists(os.path.join(site, name))
    return f"{listed} files, {missing} missing"


def tree_state(path: str) -> str:
    """An artifact tree by its entries' count, total size and newest change (links not followed)."""
    if not os.path.isdir(path):
        return ABSENT
    count = size = newest = 0
    for root, directories, files in os.walk(path):
        for name in directories + files:
            status = os.lstat(os.path.join(root, name))
            count, size, newest = count + 1, size + status.st_size, max(newest, status.st_mtime_ns)
    return f"{count} entries, {size} bytes, newest {newest}"


def sysctl_state(path: str) -> dict[str, str]:
    """The live value of every kernel setting the file sets (a reboot or another tool may have changed it)."""
    live = {}
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return {}
    for line in lines:
        if "=" not in line or line.lstrip().startswith(("#", ";")):
            continue
        key = line.split("=", 1)[0].strip().lstrip("-")
        try:
            with open("/proc/sys/" + key.replace(".", "/"), encoding="utf-8") as handle:
                live[key] = " ".join(handle.read().split())
        except OSError:
            live[key] = ABSENT
    return live


def nft_state(table: str, run=subprocess.run) -> str:
    """The firewall table as the kernel holds it, without its packet counters (they change all the time)."""
    family, name = table.split()
    result = run(["nft", "list", "table", family, name], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return ABSENT
    return hashlib.sha256(NFT_COUNTERS.sub("", result.stdout).encode()).hexdigest()


def snapshot(look: dict, run=subprocess.run) -> dict:
    """What the deploy left on this host, for every item ``look`` (built from the plan) names."""
    return {
        "files": {path: file_state(path) for path in look.get("files", [])},
        "directories": {path: directory_state(path) for path in look.get("directories", [])},
        "units": unit_states(look.get("units", []), run),
        "venvs": {path: venv_state(path) for path in look.get("venvs", [])},
        "trees": {path: tree_state(path) for path in look.get("trees", [])},
        "sysctl": sysctl_state(look["sysctl"]) if look.get("sysctl") else {},
        "firewall": nft_state(look["firewall"], run) if look.get("firewall") else "",
    }


def drift(recorded: dict, current: dict) -> list[str]:
    """What differs between the snapshot the last whole deploy recorded and this one, one line each."""
    lines = []
    for kind in sorted(set(recorded) | set(current)):
        before, now = recorded.get(kind), current.get(kind)
        if isinstance(before, dict) and isinstance(now, dict):
            for item in sorted(set(before) | set(now)):
                if before.get(item) != now.get(item):
                    lines.append(f"{kind} {item}: {_short(before.get(item, 'not looked at'))} -> "
                                 f"{_short(now.get(item, 'not looked at'))}")
        elif before != now:
            lines.append(f"{kind}: {_short(before)} -> {_short(now)}")
    return lines


def _short(value) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:28] + "..." + text[-28:]


def unhealthy(urls: list[str], timeout: float = 5.0) -> list[str]:
    """Each health URL that does not answer 200, with what it said."""
    problems = []
    for url in urls:
        status, problem = answer(url, timeout)
        if status != 200:
            problems.append(f"{url}: {problem or 'no answer'}")
    return problems


def read_record(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("version") == RECORD_VERSION else None


def write_record(path: str, digest: str, look: dict, taken: dict) -> None:
    """Root's alone (0600): the digest is derived from secrets among other things."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=".converge.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump({"version": RECORD_VERSION, "digest": digest, "look": look, "snapshot": taken}, handle,
                      sort_keys=True)
            handle.write("\n")
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def remove_record(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


NO_RECORD = "no record of a whole deploy that succeeded here"
DIGEST_CHANGED = "the plan, the collection, the variables or the TLS material changed since the last whole deploy"
LOOK_CHANGED = "what the plan puts on this host changed"


def _differences(look: dict, recorded_snapshot: dict, run, health_timeout: float) -> list[str]:
    reasons = drift(recorded_snapshot, snapshot(look, run))
    return reasons + [f"health {problem}" for problem in unhealthy(look.get("health", []), health_timeout)]


def _shown(reasons: list[str]) -> dict:
    shown = reasons[:DRIFT_SHOWN] + ([f"... and {len(reasons) - DRIFT_SHOWN} more"] if len(reasons) > DRIFT_SHOWN else [])
    return {"in_sync": not reasons, "reasons": shown}


def verdict(record: dict | None, digest: str, look: dict, run=subprocess.run, health_timeout: float = 5.0) -> dict:
    """``in_sync`` and, when not, ``reasons`` (the first few lines of what differs)."""
    if record is None:
        return {"in_sync": False, "reasons": [NO_RECORD]}
    if record.get("digest") != digest:
        return {"in_sync": False, "reasons": [DIGEST_CHANGED]}
    if record.get("look") != look:
        return {"in_sync": False, "reasons": [LOOK_CHANGED]}
    return _shown(_differences(look, record.get("snapshot") or {}, run, health_timeout))


def fingerprint(value) -> str:
    """The SHA-256 of a JSON value written canonically: the record's digest and look, compared on the controller
    without either leaving the host."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def take_record(path: str, run=subprocess.run, health_timeout: float = 5.0) -> dict | None:
    """The check's look taken early, in the host's discovery call (host_facts), so that the no-op check needs no
    second call: the record's look taken again and compared with its snapshot, and fingerprints of the digest and
    look it was made with, for ``judge`` on the controller once the plan is known. None when the record exists but
    cannot be read (not root): the check then takes its own look."""
    try:
        with open(path, encoding="utf-8"):
            pass
    except FileNotFoundError:
        return {"path": path, "record": False}
    except OSError:
        return None
    record = read_record(path)
    if record is None:
        return {"path": path, "record": False}
    look = record.get("look") or {}
    return {"path": path, "record": True, "digest": fingerprint(record.get("digest")), "look": fingerprint(look),
            "reasons": _differences(look, record.get("snapshot") or {}, run, health_timeout)}


def judge(taken: dict, digest: str, look: dict) -> dict:
    """``verdict``'s answer from what ``take_record`` found on the host: the same reasons, in the same order."""
    if not taken.get("record"):
        return {"in_sync": False, "reasons": [NO_RECORD]}
    if taken.get("digest") != fingerprint(digest):
        return {"in_sync": False, "reasons": [DIGEST_CHANGED]}
    if taken.get("look") != fingerprint(look):
        return {"in_sync": False, "reasons": [LOOK_CHANGED]}
    return _shown(list(taken.get("reasons") or []))
