"""The built collection: the tarball installs, and its playbooks and plugins work from the installed path."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from unitlib import REPO

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _names
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import MARKER

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
    _unused, tarball, _unused = installed
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    assert "plugins/plugin_utils/plan/_planner.py" in names
    assert "data/support.yml" in names and "data/engines/0.26.0.yaml" in names
    assert "playbooks/render.yml" in names
    assert not any(n.startswith(("tests/", ".collection", ".ci/")) for n in names)
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"MANIFEST.json", "FILES.json", "README.md", "CHANGELOG.rst", "LICENSE", "changelogs", "dashboards",
                   "data", "docs", "inventories", "meta", "playbooks", "plugins", "roles"}, top
    assert not any(n.startswith("changelogs/fragments") or "__pycache__" in n for n in names)
    assert "inventories/example/hosts.yml" in names and not any(n.startswith("inventories/lab") for n in names)
    # The user docs ship with their index; the engineering record (run logs, GPU evidence) stays in the repository.
    assert "docs/README.md" in names and "docs/benchmarks.md" in names
    assert (REPO / "record" / "gpu-evidence.md").is_file()
    assert not any(n == "record" or n.startswith("record/") for n in names), [n for n in names if "record" in n]


def test_build_ignore_keeps_out_everything_git_ignores():
    """A build from a working tree (venvs, caches, renders lying around) ships what a clean clone would."""
    ignored = yaml.safe_load((REPO / "galaxy.yml").read_text())["build_ignore"]
    patterns = [line.strip().strip("/") for line in (REPO / ".gitignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    missing = [p for p in patterns if p not in ignored and f"**/{p}" not in ignored]
    assert not missing, f"galaxy.yml build_ignore lacks {missing} (in .gitignore)"


def test_installed_render_playbook_matches_the_golden_render(installed, tmp_path):
    root, _unused, env = installed
    out = tmp_path / "render"
    run(["ansible-playbook", "vllm_omni.serve.render", "-i", str(GOLDEN / "pd-1host-8gpu" / "inventory"),
         "-e", f"vllm_omni_render_dir={out}"], root, env)
    expected = GOLDEN / "pd-1host-8gpu" / "expected"
    written = {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file() and p.name != MARKER}
    wanted = {p.relative_to(expected).as_posix(): p.read_text() for p in expected.rglob("*") if p.is_file()}
    assert sorted(written) == sorted(wanted) and len(wanted) > 10, sorted(set(written) ^ set(wanted))
    for path, text in wanted.items():
        assert written[path] == text, path


def _defined_filters() -> list[str]:
    names = []
    for path in sorted((REPO / "plugins" / "filter").glob("*.py")):
        names += re.findall(r'"([a-z_]+)": [a-z_]+[,}]', path.read_text().split("class FilterModule", 1)[1])
    return names


def test_every_plugin_and_role_documents_itself_with_its_own_text(installed):
    """ansible-doc of every filter, module and role shows that plugin's own documentation (not a neighbour's)."""
    root, _unused, env = installed
    filters = _defined_filters()
    assert len(filters) == len(set(filters)) >= 20
    for path in (REPO / "plugins" / "filter").glob("*.py"):  # one filter per file: its DOCUMENTATION is found
        assert len(re.findall(r'"[a-z_]+": [a-z_]+[,}]', path.read_text().split("class FilterModule", 1)[1])) == 1, path
    modules = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))
    roles = sorted(p.name for p in (REPO / "roles").iterdir())
    lookups = sorted(p.stem for p in (REPO / "plugins" / "lookup").glob("*.py"))
    for plugin_type, names in (("filter", filters), ("module", modules), ("lookup", lookups), ("role", roles)):
        result = run(["ansible-doc", "-t", plugin_type, "--json", *(f"vllm_omni.serve.{n}" for n in names)], root, env)
        docs = json.loads(result.stdout)
        assert sorted(docs) == sorted(f"vllm_omni.serve.{n}" for n in names), plugin_type
        for fqcn, doc in docs.items():
            if plugin_type == "role":
                assert doc["entry_points"]["main"]["short_description"], fqcn
                continue
            assert fqcn.endswith("." + doc["doc"][plugin_type if plugin_type == "module" else "name"]), (fqcn, doc["doc"])
            assert doc["doc"]["short_description"] and doc["examples"], fqcn


def test_the_controller_cache_lookup_is_the_planners_cache(installed, tmp_path):
    """The roles' cache directory (the lookup) is the one the planner's discovery and TLS use (_names.cache_root):
    $VLLM_OMNI_CACHE, an empty one counting as unset, and a part leading out of it refused in one line."""
    root, _unused, env = installed
    expression = "msg={{ lookup('vllm_omni.serve.controller_cache', 'reports', 'abc') }}"
    for cache, expected in ((str(tmp_path / "c"), tmp_path / "c" / "reports" / "abc"),
                            ("", Path(env["HOME"]) / ".cache" / "vllm-omni-serve" / "reports" / "abc")):
        result = run(["ansible", "localhost", "-m", "ansible.builtin.debug", "-a", expression], root,
                     {**env, "VLLM_OMNI_CACHE": cache})
        assert f'"msg": "{expected}"' in result.stdout
        assert _names.controller_cache_path("reports", "abc", environ={**env, "VLLM_OMNI_CACHE": cache}) == expected
    refused = subprocess.run(["ansible", "localhost", "-m", "ansible.builtin.debug", "-a",
                              "msg={{ lookup('vllm_omni.serve.controller_cache', '../etc') }}"],
                             cwd=root, env=env, capture_output=True, text=True, check=False)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "'../etc' is not a relative path inside the controller cache" in said
    assert "Traceback" not in said


def test_installed_plan_filter_works_in_an_ad_hoc_command(installed):
    root, _unused, env = installed
    result = run(["ansible", "localhost", "-i", str(GOLDEN / "pd-2hosts" / "inventory"), "-m", "ansible.builtin.debug",
                  "-a", "msg={{ (hostvars | vllm_omni.serve.plan(groups)).worker_urls }}"], root, env)
    assert "http://192.168.10.21:9000" in result.stdout and "http://192.168.10.22:9000" in result.stdout
