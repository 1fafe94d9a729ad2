"""Golden renders: each tests/golden/<case>/inventory renders exactly to tests/golden/<case>/expected.

Regenerate on purpose with `make golden-update` and review the diff like code.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from testlib import load_ansible_inventory
from unitlib import REPO

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import MARKER, render_tree

GOLDEN = REPO / "tests" / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "inventory").is_dir())
UPDATE = os.environ.get("VLLM_OMNI_GOLDEN_UPDATE") == "1"


def read_tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != MARKER}


@pytest.mark.parametrize("case", CASES)
def test_golden_render(case):
    tree = render_tree(build_plan(load_ansible_inventory(GOLDEN / case / "inventory")))
    expected_dir = GOLDEN / case / "expected"
    if UPDATE:
        shutil.rmtree(expected_dir, ignore_errors=True)
        for path, text in tree.items():
            (expected_dir / path).parent.mkdir(parents=True, exist_ok=True)
            (expected_dir / path).write_text(text)
    expected = read_tree(expected_dir)
    assert sorted(tree) == sorted(expected), "files differ; run `make golden-update` if the change is intended"
    for path, text in tree.items():
        assert text == expected[path], f"{case}/{path} differs; run `make golden-update` if intended"


def test_shipped_example_inventory_plans_cleanly():
    plan = build_plan(load_ansible_inventory(REPO / "inventories" / "example"))
    assert sorted(plan["hosts"]) == ["gpu-node-01", "gpu-node-02"]
    assert all(len(h["pipelines"]) == 2 for h in plan["hosts"].values())


def test_render_playbook_writes_the_golden_files_and_rerenders_byte_identical(tmp_path):
    case = GOLDEN / "pd-2hosts"
    out = tmp_path / "render"
    command = ["ansible-playbook", "playbooks/render.yml", "-i", str(case / "inventory"),
               "-e", f"vllm_omni_render_dir={out}"]
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    first = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "changed=1" in first.stdout
    # No warning the user did not cause (an unmatched host pattern, a deprecated filter of ours): Ansible's own
    # warning lines. The plan's warnings are the summary's, about the inventory.
    assert "[WARNING]" not in first.stdout + first.stderr and "[DEPRECATION WARNING]" not in first.stdout + first.stderr
    assert read_tree(out) == read_tree(case / "expected")
    second = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert second.returncode == 0 and "changed=0" in second.stdout


def test_render_playbook_refuses_bad_input_and_writes_nothing(tmp_path):
    out = tmp_path / "render"
    command = ["ansible-playbook", "playbooks/render.yml", "-i", str(GOLDEN / "pd-1host-3gpu" / "inventory"),
               "-e", f"vllm_omni_render_dir={out}", "-e", '{"vllm_omni_tensor_parallel_size": 2}']
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "host gpu-1: vllm_omni_gpus lists 3 GPUs [0, 1, 2], but one pd pipeline needs 5" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert not out.exists()


@pytest.mark.parametrize("case", CASES)
def test_plan_json_is_plain_json_of_the_whole_plan(case):
    plan = build_plan(load_ansible_inventory(GOLDEN / case / "inventory"))
    assert json.loads(render_tree(plan)["plan.json"]) == plan
