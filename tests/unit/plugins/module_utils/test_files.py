"""plan_files' logic: directories and files put in place in one pass, only where the host differs."""

from __future__ import annotations

import grp
import os
import pwd
import stat

import pytest

from ansible_collections.vllm_omni.serve.plugins.module_utils._files import FilesError, apply

USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


def owned(path, mode, **extra):
    return {"path": str(path), "owner": USER, "group": GROUP, "mode": mode, **extra}


def layout(root, text="a = 1\n"):
    directories = [owned(root / "etc", "0750"), owned(root / "etc" / "unit.d", "0755")]
    files = [owned(root / "etc" / "peers.nft", "0644", content="peers\n"),
             owned(root / "etc" / "unit.d" / "10.conf", "0640", content=text)]
    return directories, files


def test_a_first_run_creates_everything_and_a_second_changes_nothing(tmp_path):
    directories, files = layout(tmp_path)
    first = apply(directories, files, check=False)
    assert first["changed"] and len(first["changed_paths"]) == 4
    assert (tmp_path / "etc/unit.d/10.conf").read_text() == "a = 1\n"
    assert stat.S_IMODE(os.stat(tmp_path / "etc").st_mode) == 0o750
    assert stat.S_IMODE(os.stat(tmp_path / "etc/unit.d/10.conf").st_mode) == 0o640
    second = apply(directories, files, check=False)
    assert not second["changed"] and second["changed_paths"] == [] and second["diff"] == []
    assert [item["changed"] for item in second["files"]] == [False, False]


def test_only_the_changed_file_is_written_and_nothing_is_left_beside_it(tmp_path):
    directories, files = layout(tmp_path)
    apply(directories, files, check=False)
    before = os.stat(tmp_path / "etc/peers.nft").st_mtime_ns
    directories, files = layout(tmp_path, text="a = 2\n")
    result = apply(directories, files, check=False)
    assert result["changed_paths"] == [str(tmp_path / "etc/unit.d/10.conf")]
    assert result["diff"][0]["before"] == "a = 1\n" and result["diff"][0]["after"] == "a = 2\n"
    assert os.stat(tmp_path / "etc/peers.nft").st_mtime_ns == before
    assert sorted(os.listdir(tmp_path / "etc/unit.d")) == ["10.conf"]


def test_a_changed_mode_alone_is_fixed_and_shown_as_attributes(tmp_path):
    directories, files = layout(tmp_path)
    apply(directories, files, check=False)
    os.chmod(tmp_path / "etc/peers.nft", 0o600)
    result = apply(directories, files, check=False)
    assert result["changed_paths"] == [str(tmp_path / "etc/peers.nft")]
    assert "mode=0600" in result["diff"][0]["before"] and "mode=0644" in result["diff"][0]["after"]
    assert stat.S_IMODE(os.stat(tmp_path / "etc/peers.nft").st_mode) == 0o644


def test_check_mode_reports_and_writes_nothing(tmp_path):
    directories, files = layout(tmp_path)
    result = apply(directories, files, check=True)
    assert len(result["changed_paths"]) == 4
    assert result["diff"][-1]["after_header"] == str(tmp_path / "etc/unit.d/10.conf")
    assert not (tmp_path / "etc").exists()


def test_a_refused_candidate_never_replaces_the_file(tmp_path):
    directories, files = layout(tmp_path)
    apply(directories, files, check=False)
    directories, files = layout(tmp_path, text="broken\n")
    files[1]["validate"] = "grep -q '^a = ' %s"
    with pytest.raises(FilesError) as refused:
        apply(directories, files, check=False)
    message = str(refused.value)
    assert f"{tmp_path}/etc/unit.d/10.conf was not replaced" in message and "exit 1" in message
    assert message.endswith("(already changed in this call: nothing)")
    assert (tmp_path / "etc/unit.d/10.conf").read_text() == "a = 1\n"
    assert sorted(os.listdir(tmp_path / "etc/unit.d")) == ["10.conf"]


def test_a_passing_check_sees_the_new_text(tmp_path):
    directories, files = layout(tmp_path, text="a = 3\n")
    files[1]["validate"] = "grep -q '^a = 3$' %s"
    assert apply(directories, files, check=False)["changed"]
    assert (tmp_path / "etc/unit.d/10.conf").read_text() == "a = 3\n"


@pytest.mark.parametrize(("change", "expected"), [
    (lambda d, f: f[0].update(owner="no-such-user-here"), "user 'no-such-user-here' does not exist on this host"),
    (lambda d, f: f[0].update(mode="rw-r--r--"), "mode 'rw-r--r--' is not an octal mode"),
    (lambda d, f: d.pop(), "its directory"),
])
def test_bad_entries_are_named(tmp_path, change, expected):
    directories, files = layout(tmp_path)
    change(directories, files)
    if expected == "its directory":
        files[:] = files[1:]
    with pytest.raises(FilesError, match=expected):
        apply(directories, files, check=False)


def test_a_directory_where_a_file_belongs_is_refused(tmp_path):
    directories, files = layout(tmp_path)
    (tmp_path / "etc/peers.nft").mkdir(parents=True)
    with pytest.raises(FilesError, match="exists and is not a regular file"):
        apply(directories, files, check=False)


def test_check_mode_counts_an_account_the_deploy_would_create_as_a_change(tmp_path):
    directories, files = layout(tmp_path)
    apply(directories, files, check=False)
    directories[0]["group"] = files[0]["owner"] = "not-created-yet"
    result = apply(directories, files, check=True)
    assert result["changed_paths"] == [str(tmp_path / "etc"), str(tmp_path / "etc/peers.nft")]
