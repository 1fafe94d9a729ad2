"""The controller's model fetch (roles/artifacts/files/model_fetch.py), against a fake huggingface_hub.

The script resolves a revision to a commit, downloads it with snapshot_download and then checks
every file against the hub's own metadata (sha256 for LFS files, the git blob sha1 for the others).
Nothing here reaches the hub: a fake ``huggingface_hub`` in sys.modules answers model_info from
files the test writes, and its snapshot_download copies them (or corrupts one, or leaves extras).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import shutil
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "roles/artifacts/files/model_fetch.py"
REPO_ID = "org/omni-model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "secret-token-value"  # noqa: S105 (a fake token: the tests check it is never printed)


class RepositoryNotFoundError(Exception):
    pass


class GatedRepoError(RepositoryNotFoundError):
    pass


class RevisionNotFoundError(Exception):
    pass


class HfHubHTTPError(OSError):
    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.response = SimpleNamespace(status_code=status)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


class FakeHub:
    """The hub for one commit: model_info lists the files under src, snapshot_download copies them."""

    def __init__(self, src: Path, big: int):
        self.src = src
        self.files = {
            "config.json": b'{"architectures": ["Omni"]}\n',
            "model.safetensors": os.urandom(big),  # LFS, over one hashing chunk
            "tokenizer/vocab.txt": b"a\nb\nc\n" * 100,  # LFS, described by a plain dict
        }
        for name, data in self.files.items():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes(data)
        self.blob_ids = {name: git_blob_sha1(data) for name, data in self.files.items()}
        self.info_error: BaseException | None = None
        self.corrupt: set[str] = set()
        self.skip: set[str] = set()
        self.extra: dict[str, bytes] = {}
        self.apis: list[dict] = []
        self.infos: list[dict] = []
        self.downloads: list[dict] = []

    def sibling(self, name: str) -> SimpleNamespace:
        data = self.files[name]
        sha256 = hashlib.sha256(data).hexdigest()
        lfs = {
            "model.safetensors": SimpleNamespace(sha256=sha256, size=len(data), pointer_size=134),
            "tokenizer/vocab.txt": {"sha256": sha256, "size": len(data), "pointerSize": 134},
        }.get(name)
        return SimpleNamespace(rfilename=name, size=len(data), blob_id=self.blob_ids[name], lfs=lfs)

    def module(self) -> types.ModuleType:
        hub = self

        class HfApi:
            def __init__(self, endpoint=None, token=None):
                hub.apis.append({"endpoint": endpoint, "token": token})

            def model_info(self, repo_id, *, revision=None, files_metadata=False, token=None):
                hub.infos.append({"repo_id": repo_id, "revision": revision, "files_metadata": files_metadata,
                                  "token": token})
                if hub.info_error is not None:
                    raise hub.info_error
                return SimpleNamespace(sha=COMMIT, siblings=[hub.sibling(name) for name in hub.files])

        def snapshot_download(*, repo_id, revision, local_dir, token=None, endpoint=None):
            hub.downloads.append({"repo_id": repo_id, "revision": revision, "local_dir": local_dir,
                                  "token": token, "endpoint": endpoint})
            out = Path(local_dir)
            for name in hub.files:
                if name in hub.skip:
                    continue
                (out / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(hub.src / name, out / name)
                if name in hub.corrupt:  # same size, other bytes: only the hash can tell
                    data = bytearray((out / name).read_bytes())
                    data[-1] ^= 0xFF
                    (out / name).write_bytes(bytes(data))
            for name, data in hub.extra.items():
                (out / name).parent.mkdir(parents=True, exist_ok=True)
                (out / name).write_bytes(data)
            metadata = out / ".cache" / "huggingface" / "download"
            metadata.mkdir(parents=True, exist_ok=True)
            (metadata / "config.json.metadata").write_text(f"{COMMIT}\netag\n0\n")
            return str(out)

        module = types.ModuleType("huggingface_hub")
        module.HfApi = HfApi
        module.snapshot_download = snapshot_download
        utils = types.ModuleType("huggingface_hub.utils")
        for cls in (RepositoryNotFoundError, GatedRepoError, RevisionNotFoundError, HfHubHTTPError):
            setattr(utils, cls.__name__, cls)
        module.utils = utils
        return module


@pytest.fixture
def mf():
    """The script, loaded fresh as a module."""
    spec = importlib.util.spec_from_file_location("model_fetch_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def hub(tmp_path, monkeypatch, mf):
    src = tmp_path / "src"
    src.mkdir()
    fake = FakeHub(src, mf.CHUNK + 4099)
    module = fake.module()
    monkeypatch.setitem(sys.modules, "huggingface_hub", module)
    monkeypatch.setitem(sys.modules, "huggingface_hub.utils", module.utils)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    return fake


def run(mf, capsys, out: Path, *extra: str, revision: str = "main") -> tuple[int, str, str]:
    code = mf.main(["--repo", REPO_ID, "--revision", revision, "--out", str(out), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("model_fetch: ")]


def test_good_fetch_verifies_and_stamps(mf, hub, tmp_path, capsys):
    out = tmp_path / "models" / "omni"
    code, stdout, stderr = run(mf, capsys, out)
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert len(lines) == 1
    total = sum(len(data) for data in hub.files.values())
    assert json.loads(lines[0]) == {"repo": REPO_ID, "commit": COMMIT, "files": 3, "bytes": total, "fetched": True}
    assert hub.infos == [{"repo_id": REPO_ID, "revision": "main", "files_metadata": True, "token": TOKEN}]
    assert [d["revision"] for d in hub.downloads] == [COMMIT]  # the resolved commit, not the branch
    assert hub.downloads[0]["token"] == TOKEN and hub.downloads[0]["local_dir"] == str(out)
    assert not (out / ".cache").exists()
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == sorted(hub.files)
    for name, data in hub.files.items():
        assert (out / name).read_bytes() == data
    stamp = json.loads((out.parent / "omni.verified.json").read_text())
    assert stamp["repo"] == REPO_ID and stamp["commit"] == COMMIT
    assert set(stamp["files"]) == set(hub.files)
    assert stamp["files"]["config.json"]["size"] == len(hub.files["config.json"])
    assert TOKEN not in stdout + stderr


def test_endpoint_goes_to_both_calls(mf, hub, tmp_path, capsys):
    code, _stdout, stderr = run(mf, capsys, tmp_path / "omni", "--endpoint", "https://mirror.example")
    assert code == 0, stderr
    assert hub.apis[0]["endpoint"] == "https://mirror.example"
    assert hub.downloads[0]["endpoint"] == "https://mirror.example"


def test_second_run_with_stamp_downloads_and_hashes_nothing(mf, hub, tmp_path, capsys, monkeypatch):
    out = tmp_path / "omni"
    assert run(mf, capsys, out)[0] == 0
    hub.downloads.clear()

    def no_hashing(*_args):
        raise AssertionError("a verified copy must not be hashed again")

    monkeypatch.setattr(mf, "file_digest", no_hashing)
    code, stdout, stderr = run(mf, capsys, out)
    assert code == 0, stderr
    assert hub.downloads == []
    report = json.loads(stdout)
    assert report["fetched"] is False and report["commit"] == COMMIT and report["files"] == 3


def test_pinned_commit_with_stamp_does_not_ask_the_hub(mf, hub, tmp_path, capsys):
    out = tmp_path / "omni"
    assert run(mf, capsys, out, revision=COMMIT)[0] == 0
    hub.infos.clear()
    hub.downloads.clear()
    code, stdout, _stderr = run(mf, capsys, out, revision=COMMIT)
    assert code == 0
    assert hub.infos == [] and hub.downloads == []
    assert json.loads(stdout)["bytes"] == sum(len(data) for data in hub.files.values())


def test_changed_file_invalidates_the_stamp(mf, hub, tmp_path, capsys):
    out = tmp_path / "omni"
    assert run(mf, capsys, out)[0] == 0
    hub.downloads.clear()
    (out / "config.json").write_bytes(b'{"architectures": ["Else"]}\n')  # same size, new mtime
    code, stdout, stderr = run(mf, capsys, out)
    assert code == 0, stderr
    assert len(hub.downloads) == 1
    assert json.loads(stdout)["fetched"] is True
    assert (out / "config.json").read_bytes() == hub.files["config.json"]


def test_lfs_file_with_wrong_sha256_is_deleted(mf, hub, tmp_path, capsys):
    out = tmp_path / "omni"
    hub.corrupt = {"model.safetensors"}
    code, stdout, stderr = run(mf, capsys, out)
    assert code == 2
    assert stdout == ""
    [line] = error_lines(stderr)
    assert "model.safetensors" in line and "re-run to fetch it again" in line
    assert "config.json" not in line
    assert not (out / "model.safetensors").exists()
    assert (out / "config.json").read_bytes() == hub.files["config.json"]
    assert not (tmp_path / "omni.verified.json").exists()


def test_non_lfs_file_with_wrong_blob_id_fails(mf, hub, tmp_path, capsys):
    out = tmp_path / "omni"
    hub.blob_ids["config.json"] = git_blob_sha1(b"something else\n")
    code, stdout, stderr = run(mf, capsys, out)
    assert code == 2
    assert stdout == ""
    [line] = error_lines(stderr)
    assert "config.json" in line and "git blob sha1" in line
    assert not (out / "config.json").exists()
    assert not (tmp_path / "omni.verified.json").exists()


def test_missing_file_fails(mf, hub, tmp_path, capsys):
    hub.skip = {"tokenizer/vocab.txt"}
    code, _stdout, stderr = run(mf, capsys, tmp_path / "omni")
    assert code == 2
    [line] = error_lines(stderr)
    assert "tokenizer/vocab.txt (missing)" in line


def test_files_not_in_the_revision_are_deleted(mf, hub, tmp_path, capsys):
    out = tmp_path / "omni"
    out.mkdir()
    (out / "old-shard.safetensors").write_bytes(b"from an earlier revision")
    hub.extra = {"stale/nested/leftover.bin": b"x" * 10}
    code, stdout, stderr = run(mf, capsys, out)
    assert code == 0, stderr
    assert not (out / "old-shard.safetensors").exists()
    assert not (out / "stale").exists()
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == sorted(hub.files)
    assert json.loads(stdout)["files"] == 3


def test_unsafe_file_name_from_the_hub_is_refused(mf, hub, tmp_path, capsys):
    hub.files["../escape.txt"] = b"outside"
    hub.blob_ids["../escape.txt"] = git_blob_sha1(b"outside")
    code, _stdout, stderr = run(mf, capsys, tmp_path / "deep" / "omni")
    assert code == 2
    [line] = error_lines(stderr)
    assert "'../escape.txt'" in line
    assert hub.downloads == []
    assert not (tmp_path / "deep" / "escape.txt").exists()


@pytest.mark.parametrize(("error", "expected"), [
    (RepositoryNotFoundError(f"404 Client Error. Repository Not Found for url. Authorization: Bearer {TOKEN}"),
     "repository org/omni-model not found"),
    (GatedRepoError(f"403 Client Error. Cannot access gated repo. token={TOKEN}"), "gated"),
    (RevisionNotFoundError("404 Client Error. Revision Not Found"), "revision 'main' not found"),
    (HfHubHTTPError(f"401 Unauthorized {TOKEN}", 401), "set vllm_omni_hf_token"),
    (HfHubHTTPError("500 Server Error", 500), "HTTP 500"),
    (ConnectionError(f"Failed to resolve 'huggingface.co' ({TOKEN})"), "HF_ENDPOINT"),
    (RuntimeError(f"unexpected: Bearer {TOKEN}"), "RuntimeError"),
])
def test_hub_errors_are_one_line_without_the_token(mf, hub, tmp_path, capsys, error, expected):
    hub.info_error = error
    code, stdout, stderr = run(mf, capsys, tmp_path / "omni")
    assert code == 2
    assert stdout == ""
    [line] = error_lines(stderr)
    assert expected in line
    if isinstance(error, RepositoryNotFoundError):
        assert "vllm_omni_hf_token" in line
    assert "Traceback" not in stdout + stderr
    assert TOKEN not in stdout + stderr
    assert hub.downloads == []


def test_network_error_names_the_endpoint(mf, hub, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "https://user:pw@hf-mirror.internal")
    hub.info_error = ConnectionError("Connection refused")
    code, _stdout, stderr = run(mf, capsys, tmp_path / "omni")
    assert code == 2
    [line] = error_lines(stderr)
    assert "https://hf-mirror.internal" in line and "HF_ENDPOINT" in line
    assert "pw@" not in stderr


def test_missing_huggingface_hub_gives_the_install_hint(mf, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    monkeypatch.setitem(sys.modules, "huggingface_hub.utils", None)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    code, stdout, stderr = run(mf, capsys, tmp_path / "omni")
    assert code == 2
    assert stdout == ""
    [line] = error_lines(stderr)
    assert "pip install huggingface_hub" in line
    assert "the one ansible-playbook runs" in line
    assert "Traceback" not in stderr and TOKEN not in stderr


def test_out_at_a_filesystem_root_is_refused(mf, hub, capsys):
    code, _stdout, stderr = run(mf, capsys, Path("/"))
    assert code == 2
    assert "give a directory of its own" in error_lines(stderr)[0]
    assert hub.infos == []


def test_failed_refetch_leaves_no_stamp(mf, hub, tmp_path, capsys):
    out = tmp_path / "omni"
    assert run(mf, capsys, out)[0] == 0
    os.utime(out / "config.json", ns=(1, 1))  # the stamp no longer matches: fetch again
    hub.corrupt = {"model.safetensors"}
    assert run(mf, capsys, out)[0] == 2
    assert not (tmp_path / "omni.verified.json").exists()


@pytest.mark.parametrize("raw", [TOKEN + "\n", TOKEN + " \r\n", "\t" + TOKEN])
@pytest.mark.parametrize("dry", [False, True])
def test_a_token_with_whitespace_never_shows_in_any_form(mf, hub, tmp_path, capsys, monkeypatch, raw, dry):
    """A vaulted `echo TOKEN` leaves a newline: error messages that carry repr(token) or the stripped token must
    not show it either (the fetch's error path and the dry run's reason alike)."""
    monkeypatch.setenv("HF_TOKEN", raw)
    hub.info_error = RuntimeError(f"unexpected: headers={{'authorization': {('Bearer ' + raw)!r}}} token={raw.strip()}")
    code, stdout, stderr = run(mf, capsys, tmp_path / "omni", *(["--dry-run"] if dry else []))
    text = stdout + stderr
    assert TOKEN not in text and repr(raw)[1:-1] not in text
    assert code == (0 if dry else 2)


def test_the_token_can_come_on_stdin_instead_of_the_environment(mf, hub, tmp_path, capsys, monkeypatch):
    """--token-stdin (what the artifacts role passes: a task's environment shows at -vvv, its stdin does not)."""
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr(sys, "stdin", io.StringIO(TOKEN + "\n"))
    code, stdout, stderr = run(mf, capsys, tmp_path / "omni", "--token-stdin")
    assert code == 0, stderr
    assert hub.infos[0]["token"] == TOKEN and hub.downloads[0]["token"] == TOKEN
    assert TOKEN not in stdout + stderr
