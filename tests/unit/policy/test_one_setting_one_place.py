"""A setting is added in one place, data/settings.yml, and reaches everything that knows settings: validation (its
check, with the problem's host and fix), the plan (its value and where it came from), the generated docs and the
typo hints.

The test adds a synthetic entry to a copy of the collection (the planner reads data/ beside its own files), then
plans, mistypes and documents with that copy in a fresh interpreter; nothing but the table is edited.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from unitlib import REPO

ENTRY = """
  - name: vllm_omni_synthetic_probe_seconds
    scope: deployment
    default: 30
    type: int (seconds)
    check: {kind: int, low: 1, high: 600}
    doc: A setting that exists only in tests/unit/policy/test_one_setting_one_place.py.
"""

SCRIPT = r"""
import json, sys
sys.path.insert(0, ".collection")
sys.path.insert(0, "scripts")
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import PlanError
import gen_docs

def inventory(**settings):
    host = {"ansible_host": "10.0.0.11", "vllm_omni_gpus": [0, 1, 2], **settings}
    return {"engine_hosts": ["gpu-a"], "router_hosts": [], "hostvars": {"gpu-a": host}}

def problems(**settings):
    try:
        build_plan(inventory(**settings))
    except PlanError as refused:
        return [problem.line() for problem in refused.problems]
    return []

print(json.dumps({
    "set": build_plan(inventory(vllm_omni_synthetic_probe_seconds=45))["settings"]["vllm_omni_synthetic_probe_seconds"],
    "default": build_plan(inventory())["settings"]["vllm_omni_synthetic_probe_seconds"],
    "out_of_range": problems(vllm_omni_synthetic_probe_seconds=0),
    "misspelled": problems(vllm_omni_synthetic_probe_secnds=45),
    "docs": [line for line in gen_docs.variables_md().splitlines() if "vllm_omni_synthetic_probe_seconds" in line],
}))
"""


def test_a_setting_added_to_the_table_alone_is_validated_planned_documented_and_hinted(tmp_path):
    root = tmp_path / "collection"
    for name in ("plugins", "data", "scripts", "roles", "docs"):
        shutil.copytree(REPO / name, root / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (root / "README.md").write_text((REPO / "README.md").read_text())
    namespace = root / ".collection" / "ansible_collections" / "vllm_omni"
    namespace.mkdir(parents=True)
    os.symlink("../../..", namespace / "serve")
    table = root / "data" / "settings.yml"
    table.write_text(table.read_text() + ENTRY)

    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=root, capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])

    assert found["set"] == {"value": 45, "source": "inventory"}
    assert found["default"] == {"value": 30, "source": "default"}
    assert len(found["out_of_range"]) == 1
    assert "vllm_omni_synthetic_probe_seconds" in found["out_of_range"][0] and "600" in found["out_of_range"][0]
    assert len(found["misspelled"]) == 1 and "gpu-a" in found["misspelled"][0]
    assert "did you mean vllm_omni_synthetic_probe_seconds" in found["misspelled"][0]
    assert found["docs"] == ["| `vllm_omni_synthetic_probe_seconds` | deployment | int (seconds) | `30` | "
                             "A setting that exists only in tests/unit/policy/test_one_setting_one_place.py. |"]
    # The checkout's own table is untouched: the entry lived in the copy only.
    assert "vllm_omni_synthetic_probe_seconds" not in (REPO / "data" / "settings.yml").read_text()
