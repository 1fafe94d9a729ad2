# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Put a host's planned directories and files in place in one pass (the plan_files module's logic).

One module call per role instead of one ``copy``/``file`` call per file: each of those is an SSH round
trip and a Python start on the host, and a no-op deploy was mostly made of them. Every file is
compared byte for byte and by owner, group and mode; only a file that differs is written, through a
temporary file in its own directory (so a reader never sees half a file) that an optional command
validates before it is renamed into place.
"""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import subprocess
import tempfile


class FilesError(Exception):
    """A directory or file that cannot be put in place; the message names it."""


def _ids(owner: str, group: str, check: bool) -> tuple[int, int]:
    """-1 for an account that does not exist yet in check mode (the deploy would create it first, so the
    entry counts as changed); outside check mode a missing account is an error."""
    try:
        uid = pwd.getpwnam(owner).pw_uid
    except KeyError:
        if not check:
            raise FilesError(f"user {owner!r} does not exist on this host") from None
        uid = -1
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        if not check:
            raise FilesError(f"group {group!r} does not exist on this host") from None
        gid = -1
    return uid, gid


def _mode(mode: str) -> int:
    try:
        return int(str(mode), 8)
    except ValueError:
        raise FilesError(f"mode {mode!r} is not an octal mode such as 0644") from None


def _attributes_differ(status: os.stat_result, uid: int, gid: int, mode: int) -> bool:
    return status.st_uid != uid or status.st_gid != gid or (status.st_mode & 0o7777) != mode


def _attribute_text(owner: str, group: str, mode: int) -> str:
    return f"owner={owner} group={group} mode={mode:04o}\n"


def owner_names(status: os.stat_result) -> tuple[str, str]:
    """The owner's and group's names (their numbers where the host has no such account)."""
    try:
        owner = pwd.getpwuid(status.st_uid).pw_name
    except KeyError:
        owner = str(status.st_uid)
    try:
        group = grp.getgrgid(status.st_gid).gr_name
    except KeyError:
        group = str(status.st_gid)
    return owner, group


def _current_attributes(status: os.stat_result) -> str:
    return _attribute_text(*owner_names(status), status.st_mode & 0o7777)


def ensure_directory(entry: dict, check: bool) -> dict:
    """``entry``: path, owner, group, mode. Returns {path, changed, diff}."""
    path = entry["path"]
    uid, gid = _ids(entry["owner"], entry["group"], check)
    mode = _mode(entry["mode"])
    wanted = _attribute_text(entry["owner"], entry["group"], mode)
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        status = None
    if status is not None and not os.path.isdir(path):
        raise FilesError(f"{path} exists and is not a directory")
    if status is not None and not _attributes_differ(status, uid, gid, mode):
        return {"path": path, "changed": False}
    before = "absent\n" if status is None else _current_attributes(status)
    if not check:
        if status is None:
            os.makedirs(path, mode=0o755, exist_ok=True)
        os.chown(path, uid, gid)
        os.chmod(path, mode)
    return {"path": path, "changed": True,
            "diff": {"before_header": path, "after_header": path, "before": before, "after": "directory " + wanted}}


def _validate(command: str, candidate: str, path: str) -> None:
    if "%s" not in command:
        raise FilesError(f"the validate command for {path} has no %s for the file to check")
    argv = [candidate if word == "%s" else word.replace("%s", candidate) for word in shlex.split(command)]
    try:
        run = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as error:
        raise FilesError(f"{path}: cannot run its check {argv[0]!r}: {error.strerror}") from None
    if run.returncode != 0:
        detail = (run.stderr or run.stdout).strip()
        raise FilesError(f"{path} was not replaced: `{command}` refused the new text (exit {run.returncode}): {detail}")


def ensure_file(entry: dict, check: bool) -> dict:
    """``entry``: path, content, owner, group, mode, optional validate. Returns {path, changed, diff}."""
    path = entry["path"]
    content = entry["content"].encode("utf-8")
    uid, gid = _ids(entry["owner"], entry["group"], check)
    mode = _mode(entry["mode"])
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        status = None
    if status is not None and not os.path.isfile(path):
        raise FilesError(f"{path} exists and is not a regular file")
    current = None
    if status is not None:
        with open(path, "rb") as handle:
            current = handle.read()
    same_text = current == content
    if same_text and not _attributes_differ(status, uid, gid, mode):
        return {"path": path, "changed": False}
    diff = {"before_header": path, "after_header": path}
    if same_text:
        diff.update(before=_current_attributes(status), after=_attribute_text(entry["owner"], entry["group"], mode))
    else:
        diff.update(before="" if current is None else current.decode("utf-8", "replace"), after=entry["content"])
    if check:
        return {"path": path, "changed": True, "diff": diff}
    if same_text:
        os.chown(path, uid, gid)
        os.chmod(path, mode)
        return {"path": path, "changed": True, "diff": diff}
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        raise FilesError(f"{path}: its directory {directory} does not exist (the plan lists directories first)")
    handle, candidate = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.chown(candidate, uid, gid)
        os.chmod(candidate, mode)
        if entry.get("validate"):
            _validate(entry["validate"], candidate, path)
        os.replace(candidate, path)
    except BaseException:
        if os.path.exists(candidate):
            os.unlink(candidate)
        raise
    return {"path": path, "changed": True, "diff": diff}


def apply(directories: list[dict], files: list[dict], check: bool) -> dict:
    """Directories first (in order: parents before children), then files in order (a file a later
    file's check includes, such as the firewall's peer set, comes first). Stops at the first error."""
    done_directories = [ensure_directory(entry, check) for entry in directories]
    done_files = []
    for entry in files:
        try:
            done_files.append(ensure_file(entry, check))
        except FilesError as error:
            changed = [item["path"] for item in done_directories + done_files if item["changed"]]
            raise FilesError(f"{error} (already changed in this call: {', '.join(changed) or 'nothing'})") from None
    changed = [item["path"] for item in done_directories + done_files if item["changed"]]
    return {
        "changed": bool(changed),
        "changed_paths": changed,
        "directories": [{"path": item["path"], "changed": item["changed"]} for item in done_directories],
        "files": [{"path": item["path"], "changed": item["changed"]} for item in done_files],
        "diff": [item["diff"] for item in done_directories + done_files if item["changed"]],
    }
