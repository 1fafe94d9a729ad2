"""tests/conformance/preview.py: a pre-release probed ahead of support, without touching what ships.

The scratch copy of the engine plugin is armed on the preview for every fix and nothing else changes; each known
difference rewrites the rendered config exactly where the engine refused it; the committed record is consistent with
itself and is what the README's support matrix says (scripts/gen_docs.py writes that line from it).
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
from unitlib import REPO

PLUGIN = REPO / "roles" / "engine" / "files" / "engine_plugin" / "vllm_omni_serve_fixes.py"


@pytest.fixture
def preview():
    spec = importlib.util.spec_from_file_location("preview_under_test", REPO / "tests" / "conformance" / "preview.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scratch_plugin_is_armed_on_the_preview_for_every_fix_and_nothing_else(preview):
    shipped = PLUGIN.read_text()
    armed = preview.armed(shipped, "0.32.0rc1", "0.32.0")
    proven = re.findall(r'"proven_on": \((.*)\),$', armed, re.M)
    assert len(proven) == 2 and all(p.startswith('("0.32.0rc1", "0.32.0"), ') for p in proven)
    assert armed.replace('("0.32.0rc1", "0.32.0"), ', "") == shipped
    assert "0.32.0rc1" not in shipped  # the plugin that ships never arms a fix on a preview
    with pytest.raises(SystemExit, match="proven_on tuples were armed"):
        preview.armed(shipped.replace('"proven_on": (', '"proven": (', 1), "0.32.0rc1", "0.32.0")


def test_a_known_difference_rewrites_only_what_the_engine_refused(preview):
    rendered = (REPO / "tests/golden/pd-030-nixl-text-4gpu/expected/gpu-1/omni0/stage_config.yaml").read_text()
    pattern, replacement = preview.DIFFERENCES["kv_transfer_config without kv_ip"]["rewrite"]
    rewritten = re.sub(pattern, replacement, rendered)
    assert "kv_ip" in rendered and "kv_ip" not in rewritten
    assert [line for line in rendered.splitlines() if "kv_ip" not in line] == rewritten.splitlines()


def test_the_committed_record_is_consistent_and_the_readme_says_it():
    record = json.loads((REPO / "docs" / "conformance" / "preview-0.32.0rc1.json").read_text())
    first, last = record["attempts"][0], record["attempts"][-1]
    assert first["loaded"] is False and "kv_transfer_config.kv_ip" in first["error"]
    assert "/root/" not in json.dumps(record)  # no machine paths in a committed record
    assert last["with"] == record["differences"] == ["kv_transfer_config without kv_ip"]
    summary = last["summary"]
    assert summary["pd_pair"] == [0, 1] and summary["decode_receives_the_clients_fields"] is True
    assert summary["refused_as_400"] == ["logit_bias_not_a_token", "temperature_out_of_range", "two_choices"]
    assert summary["without_the_fix_decode_keeps_its_defaults"] == 2048
    assert record["seam_holds"] is True
    readme = (REPO / "README.md").read_text()
    assert ("Preview, not deployable (the planner refuses it): 0.32.0rc1 with vLLM 0.32.0, probed on CPU "
            f"{record['date']}") in readme
