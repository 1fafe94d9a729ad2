"""The built collection: the tarball installs, and its playbooks and plugins work from the installed path."""

from __future__ import annotations

import os
import subprocess
import tarfile

import pytest
from conftest import REPO

GOLDEN = REPO / "tests" / "golden"


def run(command, cwd, env):
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Build the tarball and install it into an empty collections path, away from the checkout."""
    root = tmp_path_factory.mktemp("collection")
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env["ANSIBLE_COLLECTIONS_PATH"] = str(root / "collections")
    env["HOME"] = str(root)  # no ~/.ansible from the developer's machine
    run(["ansible-galaxy", "collection", "build", "--output-path", str(root), str(REPO)], root, env)
    (tarball,) = root.glob("vllm_omni-serve-*.tar.gz")
    run(["ansible-galaxy", "collection", "install", "--offline", "-p", str(root / "collections"), str(tarball)],
        root, env)
    return root, tarball, env


def test_tarball_ships_the_collection_and_no_tests_or_links(installed):
    _, tarball, _ = installed
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    assert "plugins/plugin_utils/_planner.py" in names
    assert "data/support.yml" in names and "data/engines/0.26.0.yaml" in names
    assert "playbooks/render.yml" in names
    assert not any(n.startswith(("tests/", ".collection", ".ci/")) for n in names)


def test_installed_render_playbook_matches_the_golden_render(installed, tmp_path):
    root, _, env = installed
    out = tmp_path / "render"
    run(["ansible-playbook", "vllm_omni.serve.render", "-i", str(GOLDEN / "pd-1host-8gpu" / "inventory"),
         "-e", f"vllm_omni_render_dir={out}"], root, env)
    expected = GOLDEN / "pd-1host-8gpu" / "expected"
    for path in expected.rglob("*"):
        if path.is_file():
            assert (out / path.relative_to(expected)).read_text() == path.read_text(), path


def test_installed_filters_document_themselves(installed):
    root, _, env = installed
    for plugin_type, name in (("filter", "plan"), ("filter", "plan_summary"), ("module", "render_plan"),
                              ("module", "deployment_plan")):
        result = run(["ansible-doc", "-t", plugin_type, f"vllm_omni.serve.{name}"], root, env)
        assert "vllm_omni.serve" in result.stdout


def test_installed_plan_filter_works_in_an_ad_hoc_command(installed):
    root, _, env = installed
    result = run(["ansible", "localhost", "-i", str(GOLDEN / "pd-2hosts" / "inventory"), "-m", "ansible.builtin.debug",
                  "-a", "msg={{ (hostvars | vllm_omni.serve.plan(groups)).worker_urls }}"], root, env)
    assert "http://192.168.10.21:9000" in result.stdout and "http://192.168.10.22:9000" in result.stdout
