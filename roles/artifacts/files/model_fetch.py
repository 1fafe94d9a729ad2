# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""Fetch one revision of a Hugging Face model repository into a directory, verified file by file.

    HF_TOKEN=... python model_fetch.py --repo ORG/NAME --revision REV --out DIR [--endpoint URL]

Run by the artifacts role on the controller with Ansible's own Python. It needs the standard
library and ``huggingface_hub`` (imported only when the hub has to be asked, so a missing package
is a one-line hint rather than a traceback).

Why it is built this way:

* The revision (a branch, tag or commit) is resolved to a commit once, and that commit is what is
  downloaded: a branch that moves while the download runs cannot mix two revisions in DIR.
* Every file is checked against the hub's own metadata for that commit, not against whatever the
  download wrote: its size, and the sha256 of LFS files or the git blob sha1 of the others. A file
  that does not match is deleted and named, and the script fails; files that are not in the
  revision are deleted. When it succeeds DIR holds exactly the revision, nothing more.
* The download is resumable: ``snapshot_download`` picks up partial files left in DIR by an
  interrupted run. Its bookkeeping (``DIR/.cache``) is removed only after a download completes.
* A verified copy is recorded in ``DIR/../<basename>.verified.json`` (commit, and each file's size
  and mtime_ns). A re-run whose stamp still matches DIR downloads and hashes nothing; when the
  revision is a full commit sha it does not even ask the hub.
* The token comes only from stdin (``--token-stdin``: Ansible's -vvv prints a task's environment, not
  its stdin) or the environment (``HF_TOKEN``), never from the command line, and is never printed.
  ``HF_ENDPOINT`` (read by huggingface_hub itself) or ``--endpoint`` picks a mirror.

Prints progress on stderr and, on success, exactly one JSON line on stdout:
``{"repo": ..., "commit": ..., "files": N, "bytes": TOTAL, "fetched": true|false}``, where bytes is
the size of the revision and fetched says whether the hub was downloaded from. Any failure is one
line on stderr starting with ``model_fetch: `` and exit status 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

CHUNK = 8 * 1024 * 1024
PREFIX = "model_fetch: "
DEFAULT_ENDPOINT = "https://huggingface.co"
COMMIT = re.compile(r"[0-9a-f]{40}")
INSTALL_HINT = (
    "huggingface_hub is not installed: install huggingface_hub into the controller's Python "
    "(the one ansible-playbook runs): pip install huggingface_hub"
)
HUB_ERRORS = ("GatedRepoError", "RevisionNotFoundError", "RepositoryNotFoundError", "HfHubHTTPError")
# Class names (anywhere in an exception's MRO) that mean the hub could not be reached: requests,
# httpx and the builtins spell them differently, and which one is raised depends on the version.
NETWORK_ERRORS = frozenset({
    "ConnectionError", "ConnectError", "ConnectTimeout", "ReadTimeout", "Timeout", "TimeoutError",
    "TimeoutException", "TransportError", "NetworkError", "ProxyError", "SSLError",
    "OfflineModeIsEnabled", "LocalEntryNotFoundError",
})


class FetchError(Exception):
    """A failure already worded for the user: main prints it after PREFIX and exits 2."""


class RepoFile(NamedTuple):
    """One file of the revision as the hub describes it."""

    name: str
    size: int
    algorithm: str  # "sha256" (LFS: the content's sha256) or "git-sha1" (the git blob id)
    digest: str


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="model_fetch", description="Fetch and verify one revision of a Hugging Face model.")
    parser.add_argument("--repo", required=True, help="ORG/NAME")
    parser.add_argument("--revision", required=True, help="branch, tag or commit")
    parser.add_argument("--out", required=True, help="directory that will hold exactly the revision's files")
    parser.add_argument("--endpoint", default=None, help="hub URL (default: $HF_ENDPOINT, else huggingface.co)")
    parser.add_argument("--token-stdin", action="store_true",
                        help="read the token from the first line of stdin (else $HF_TOKEN)")
    parser.add_argument("--dry-run", action="store_true",
                        help="download and write nothing: say what a fetch would bring (--check)")
    return parser.parse_args(argv)


def progress(message: str) -> None:
    print(f"[model_fetch] {message}", file=sys.stderr, flush=True)


def endpoint_shown(endpoint: str | None) -> str:
    """The endpoint in use, for messages, without any user:password part of the URL."""
    url = endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    parts = urlsplit(url)
    if parts.username or parts.password:
        parts = parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else ""))
    return urlunsplit(parts)


def human(size: int) -> str:
    """A size for progress lines: 512 B, 3.2 MiB, 14.9 GiB."""
    if size < 1024:
        return f"{size} B"
    units = ("KiB", "MiB", "GiB")
    value, index = size / 1024, 0
    while value >= 1024 and index < len(units) - 1:
        value, index = value / 1024, index + 1
    return f"{value:.1f} {units[index]}"


def load_hub() -> Any:
    try:
        import huggingface_hub
    except ImportError as exc:
        raise FetchError(INSTALL_HINT) from exc
    return huggingface_hub


def hub_error_classes() -> dict[str, type]:
    """huggingface_hub's exception classes by name; those this version lacks are left out."""
    try:
        from huggingface_hub import utils
    except ImportError:
        return {}
    found = {}
    for name in HUB_ERRORS:
        cls = getattr(utils, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found[name] = cls
    return found


def http_status(exc: BaseException) -> int | None:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def describe(exc: BaseException, args: argparse.Namespace, classes: dict[str, type]) -> str:
    """One line for a failure raised by huggingface_hub (or anything else), without the token."""
    repo, where = args.repo, endpoint_shown(args.endpoint)
    status = http_status(exc)
    if isinstance(exc, classes.get("GatedRepoError", ())):
        return (f"{repo} is a gated repository: accept its terms on the hub with your account, then set "
                f"vllm_omni_hf_token to a token of that account")
    if isinstance(exc, classes.get("RevisionNotFoundError", ())):
        return f"revision {args.revision!r} not found in {repo} at {where}"
    if isinstance(exc, classes.get("RepositoryNotFoundError", ())):
        return (f"repository {repo} not found at {where} (a private or gated repository reads the same "
                f"without a valid token: set vllm_omni_hf_token)")
    if status in (401, 403):
        return f"{where} refused access to {repo} (HTTP {status}): set vllm_omni_hf_token to a token that can read it"
    if isinstance(exc, classes.get("HfHubHTTPError", ())):
        return f"{where} answered HTTP {status or '?'} for {repo}: {first_line(exc)}"
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & NETWORK_ERRORS:
        return (f"cannot reach the hub at {where} ({type(exc).__name__}: {first_line(exc)}): check the network, "
                f"or point HF_ENDPOINT (or --endpoint) at a reachable mirror")
    return f"fetching {repo}@{args.revision} failed: {type(exc).__name__}: {first_line(exc)}"


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else "(no message)"
    return text if len(text) <= 300 else text[:297] + "..."


def scrub(text: str, token: str | None) -> str:
    """``text`` without the token in any form an error message may carry it: as given, stripped of the
    whitespace a vaulted ``echo`` leaves, escaped the way repr() and JSON write it, and each line of it."""
    if not token:
        return text
    forms = {token, token.strip(), repr(token)[1:-1], json.dumps(token)[1:-1],
             token.encode("unicode_escape").decode("ascii", "replace")}
    forms.update(part for part in token.split() if len(part) >= 8)
    for form in sorted((f for f in forms if f), key=len, reverse=True):
        text = text.replace(form, "<HF_TOKEN>")
    return text


def safe_name(name: str) -> str:
    """A sibling's path, refused if it could land outside DIR or in the download's bookkeeping."""
    path = PurePosixPath(name)
    if (not name or "\\" in name or "\0" in name or path.is_absolute()
            or any(part in ("", ".", "..") for part in name.split("/")) or path.parts[:2] == (".cache", "huggingface")):
        raise FetchError(f"the hub listed a file name that is not safe to write: {name!r}")
    return name


def lfs_field(lfs: Any, key: str) -> Any:
    """A field of a sibling's LFS record: an object in most versions, a plain dict in some."""
    value = getattr(lfs, key, None)
    if value is None and isinstance(lfs, dict):
        value = lfs.get(key)
    return value


def repo_file(sibling: Any) -> RepoFile:
    name = safe_name(str(getattr(sibling, "rfilename", "") or ""))
    lfs = getattr(sibling, "lfs", None)
    if lfs:
        size, algorithm, digest = lfs_field(lfs, "size"), "sha256", lfs_field(lfs, "sha256")
        size = getattr(sibling, "size", None) if size is None else size
    else:
        size, algorithm, digest = getattr(sibling, "size", None), "git-sha1", getattr(sibling, "blob_id", None)
    if not isinstance(size, int) or not isinstance(digest, str) or not digest:
        raise FetchError(f"the hub gave no size or checksum for {name}: it cannot be verified")
    return RepoFile(name, size, algorithm, digest.lower())


def resolve(hub: Any, args: argparse.Namespace, token: str | None) -> tuple[str, list[RepoFile]]:
    """The commit the revision names now, and the files of that commit."""
    progress(f"resolving {args.repo}@{args.revision} at {endpoint_shown(args.endpoint)}")
    info = hub.HfApi(endpoint=args.endpoint).model_info(
        args.repo, revision=args.revision, files_metadata=True, token=token)
    commit = getattr(info, "sha", None)
    if not isinstance(commit, str) or not COMMIT.fullmatch(commit):
        raise FetchError(f"the hub did not name a commit for {args.repo}@{args.revision}")
    files = [repo_file(sibling) for sibling in getattr(info, "siblings", None) or []]
    if not files:
        raise FetchError(f"the hub lists no files for {args.repo}@{commit}")
    if len({f.name for f in files}) != len(files):
        raise FetchError(f"the hub listed a file twice for {args.repo}@{commit}")
    return commit, files


def stamp_path(out: Path) -> Path:
    return out.parent / f"{out.name}.verified.json"


def tree(out: Path) -> dict[str, dict[str, int]]:
    """Every file under DIR (relative POSIX path) with its size and mtime_ns."""
    found: dict[str, dict[str, int]] = {}
    for dirpath, _dirnames, filenames in os.walk(out):
        for filename in filenames:
            path = Path(dirpath, filename)
            stat = path.stat()
            found[path.relative_to(out).as_posix()] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    return found


def verified_stamp(out: Path, repo: str, revision: str) -> dict[str, Any] | None:
    """The stamp of a verified copy still intact in DIR, for this repo and (if given) commit."""
    try:
        stamp = json.loads(stamp_path(out).read_text(encoding="utf-8"))
        if stamp["repo"] != repo or (revision and stamp["commit"] != revision) or not out.is_dir():
            return None
        return stamp if stamp["files"] == tree(out) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_stamp(out: Path, repo: str, commit: str) -> None:
    path = stamp_path(out)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps({"repo": repo, "commit": commit, "files": tree(out)}, sort_keys=True) + "\n",
                       encoding="utf-8")
    os.replace(partial, path)


def prune(out: Path, wanted: set[str]) -> list[str]:
    """Remove huggingface_hub's bookkeeping and anything else not in the revision; the names removed."""
    shutil.rmtree(out / ".cache" / "huggingface", ignore_errors=True)
    removed = []
    for dirpath, dirnames, filenames in os.walk(out, topdown=False):
        for name in filenames:
            path = Path(dirpath, name)
            relative = path.relative_to(out).as_posix()
            if relative not in wanted:
                path.unlink()
                removed.append(relative)
        for name in dirnames:
            path = Path(dirpath, name)
            if path.is_symlink():
                path.unlink()
                removed.append(path.relative_to(out).as_posix())
            elif not any(path.iterdir()):
                path.rmdir()
    return sorted(removed)


def file_digest(path: Path, algorithm: str, size: int) -> str:
    """sha256 of the content, or the git blob sha1 (sha1 of b"blob <size>\\0" + content), in 8 MiB chunks."""
    if algorithm == "sha256":
        digest = hashlib.sha256()
    else:
        digest = hashlib.sha1(usedforsecurity=False)
        digest.update(b"blob %d\0" % size)
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def problem_of(out: Path, entry: RepoFile) -> str | None:
    """Why one file of DIR is not the hub's, or None when it is."""
    path = out / entry.name
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != entry.size:
        return f"{size} bytes, the hub says {entry.size}"
    if entry.size >= 256 * 1024 * 1024:
        progress(f"hashing {entry.name} ({human(entry.size)})")
    if file_digest(path, entry.algorithm, entry.size) != entry.digest:
        return f"{'sha256' if entry.algorithm == 'sha256' else 'git blob sha1'} differs from the hub's"
    return None


def verify(out: Path, files: list[RepoFile], commit: str) -> None:
    """Check every file against the hub's metadata; delete and name the ones that do not match."""
    progress(f"verifying {len(files)} files ({human(sum(f.size for f in files))}) against commit {commit}")
    bad = []
    for entry in files:
        problem = problem_of(out, entry)
        if problem:
            remove(out / entry.name)
            bad.append(f"{entry.name} ({problem})")
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise FetchError(f"{len(bad)} file(s) did not match commit {commit} and were deleted: {shown}: "
                         f"re-run to fetch it again")


def download(hub: Any, args: argparse.Namespace, out: Path, commit: str, token: str | None) -> None:
    progress(f"downloading {args.repo}@{commit} into {out} (resumes partial files)")
    out.mkdir(parents=True, exist_ok=True)
    hub.snapshot_download(repo_id=args.repo, revision=commit, local_dir=str(out), token=token,
                          endpoint=args.endpoint)


def result(repo: str, commit: str, files: int, total: int, fetched: bool) -> dict[str, Any]:
    return {"repo": repo, "commit": commit, "files": files, "bytes": total, "fetched": fetched}


def fetch(args: argparse.Namespace, out: Path, token: str | None) -> dict[str, Any]:
    """Bring DIR to exactly the revision, verified; what was done, as the JSON line reports it."""
    if COMMIT.fullmatch(args.revision):
        stamp = verified_stamp(out, args.repo, args.revision)
        if stamp:
            progress(f"{out} already holds verified commit {args.revision}: nothing to fetch")
            return result(args.repo, args.revision, len(stamp["files"]),
                          sum(f["size"] for f in stamp["files"].values()), False)
    hub = load_hub()
    commit, files = resolve(hub, args, token)
    total = sum(f.size for f in files)
    if verified_stamp(out, args.repo, commit):
        progress(f"{out} already holds verified commit {commit}: nothing to fetch")
        return result(args.repo, commit, len(files), total, False)
    stamp_path(out).unlink(missing_ok=True)
    download(hub, args, out, commit, token)
    removed = prune(out, {f.name for f in files})
    if removed:
        progress(f"removed {len(removed)} file(s) not in the revision: {', '.join(removed[:10])}")
    verify(out, files, commit)
    write_stamp(out, args.repo, commit)
    return result(args.repo, commit, len(files), total, True)


def dry_run(args: argparse.Namespace, out: Path, token: str | None) -> dict[str, Any]:
    """What ``fetch`` would do, downloading and writing nothing: a verified copy already there (its stamp),
    else the revision's size from the hub's metadata (one request, no file), else bytes unknown and why."""
    stamp = verified_stamp(out, args.repo, args.revision if COMMIT.fullmatch(args.revision) else "")
    if stamp:
        return {**result(args.repo, stamp["commit"], len(stamp["files"]),
                         sum(f["size"] for f in stamp["files"].values()), False), "state": "verified on the controller"}
    try:
        commit, files = resolve(load_hub(), args, token)
    except Exception as exc:  # the hub is not reachable from here, or huggingface_hub is missing: say so
        reason = scrub(str(exc) if isinstance(exc, FetchError) else describe(exc, args, hub_error_classes()), token)
        return {"repo": args.repo, "commit": None, "files": None, "bytes": None, "fetched": False,
                "state": f"would fetch {args.repo}@{args.revision} from the hub; bytes unknown ({reason})"}
    total = sum(f.size for f in files)
    return {**result(args.repo, commit, len(files), total, False),
            "state": f"would fetch {args.repo}@{commit} from the hub ({len(files)} files, size from the hub's metadata)"}


def checked_out(value: str) -> Path:
    """DIR, made absolute; a root or home directory is refused (files not in the revision are deleted)."""
    out = Path(value).expanduser().resolve()
    if out.parent == out or out == Path.home().resolve():
        raise FetchError(f"--out {value!r} is {out}: give a directory of its own for the model")
    return out


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # argparse has printed "model_fetch: error: ..." or the help
        return exc.code if isinstance(exc.code, int) else 2
    # The planner refuses a token with surrounding whitespace; a helper run by hand gets the same token the hub
    # would accept (a trailing newline would make every request fail, and error messages repeat it).
    raw = (sys.stdin.readline().rstrip("\n") if args.token_stdin else os.environ.get("HF_TOKEN")) or None
    token = raw.strip() or None if raw else None
    try:
        report = (dry_run if args.dry_run else fetch)(args, checked_out(args.out), token)
    except FetchError as exc:
        print(PREFIX + scrub(scrub(str(exc), raw), token), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(PREFIX + "interrupted: re-run to resume the download", file=sys.stderr)
        return 2
    except Exception as exc:
        print(PREFIX + scrub(scrub(describe(exc, args, hub_error_classes()), raw), token), file=sys.stderr)
        return 2
    print(scrub(scrub(json.dumps(report), raw), token))
    return 0


if __name__ == "__main__":
    sys.exit(main())
