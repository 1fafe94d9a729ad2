"""Every filter plugin as Ansible sees it: each file is one filter of its own name, documented for ansible-doc, loaded
through the collection's namespace, and used by a role or playbook; every vllm_omni.serve filter a role or playbook
calls exists. The filters' behaviour is tested beside the code each one wraps (plugin_utils, tests/unit/plugins/...)."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess

import pytest
from testlib import REPO

FILTERS = sorted(p.stem for p in (REPO / "plugins" / "filter").glob("*.py") if not p.stem.startswith("_"))
# Where the collection calls its filters: roles, playbooks and the molecule scenarios' playbooks.
USERS = [p for top in ("roles", "playbooks", "molecule") for p in (REPO / top).rglob("*")
         if p.is_file() and p.suffix in (".yml", ".yaml", ".j2")]
CALLED = re.compile(r"\|\s*vllm_omni\.serve\.([a-z_][a-z0-9_]*)")


def _module(name: str):
    return importlib.import_module(f"ansible_collections.vllm_omni.serve.plugins.filter.{name}")


@pytest.fixture(scope="module")
def docs() -> dict:
    """Every filter's documentation as ansible-doc gives it (the doc fragments of plugins/doc_fragments merged in)."""
    done = subprocess.run(["ansible-doc", "-t", "filter", "--json", *(f"vllm_omni.serve.{name}" for name in FILTERS)],
                          cwd=REPO, env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", FILTERS)
def test_each_filter_file_is_one_documented_filter_of_its_own_name(name, docs):
    filters = _module(name).FilterModule().filters()
    assert list(filters) == [name], f"plugins/filter/{name}.py defines {sorted(filters)}"
    assert callable(filters[name])
    entry = docs[f"vllm_omni.serve.{name}"]
    doc = entry["doc"]
    assert doc["name"] == name and doc["short_description"] and doc["description"]
    assert "_input" in doc.get("options", {}), "ansible-doc documents the filter's input as _input"
    assert "_value" in entry["return"] and entry["return"]["_value"].get("description")
    assert f"vllm_omni.serve.{name}" in entry["examples"]


def test_every_filter_is_called_somewhere_and_every_call_names_a_filter():
    called = {name for path in USERS for name in CALLED.findall(path.read_text())}
    assert called - set(FILTERS) == set(), "roles or playbooks call filters the collection lacks"
    # For users' own playbooks, not the collection's: plan and plan_summary (the plan and its summary from hostvars
    # and groups), pd_handoff (deprecated, routed in meta/runtime.yml).
    unused = set(FILTERS) - called - {"plan", "plan_summary", "pd_handoff"}
    assert unused == set(), f"filters nothing calls: {sorted(unused)}"
