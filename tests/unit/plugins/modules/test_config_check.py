"""config_check module: request building, answer handling, failures (engine run patched out)."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.vllm_omni.serve.plugins.module_utils import _engine_check
from ansible_collections.vllm_omni.serve.plugins.modules import config_check


class Exit(Exception):
    def __init__(self, kind, result):
        super().__init__(kind)
        self.kind, self.result = kind, result


@pytest.fixture
def module_env(monkeypatch, tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    config = tmp_path / "stage_config.yaml"
    config.write_text("stage_args: []\n")
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", lambda self, **kw: (_never for _never in ()).throw(Exit("exit", kw)))
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", lambda self, **kw: (_never for _never in ()).throw(Exit("fail", kw)))
    calls = []

    def run(answer=None, stdout=None, rc=0, **args):
        def fake_run_command(self, argv, data=None, **kwargs):
            calls.append({"argv": argv, "request": json.loads(data)})
            text = stdout if stdout is not None else "engine log line\n" + _engine_check.MARKER + json.dumps(answer)
            return rc, text, "stderr tail"

        monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run_command)
        params = {"venv": str(venv), "config": str(config), "config_flag": "--stage-configs-path", **args}
        with patch_module_args(params), pytest.raises(Exit) as caught:
            config_check.main()
        return caught.value
    return run, calls, venv


def answer(problems=(), **facts):
    return {"versions": {"vllm": "0.26.0", "vllm_omni": "0.26.0"},
            "answers": [{"config": "x", "problems": list(problems), "stages": [], "imported": ["a.b"], **facts}]}


def test_clean_answer_exits_ok_and_passes_the_request(module_env):
    run, calls, venv = module_env
    outcome = run(answer(pd_pair=[0, 1]), environment={"VLLM_MOONCAKE_BOOTSTRAP_PORT": "8998"},
                  expected_pd={"pair": [0, 1], "bootstrap": "10.0.0.1:8998"})
    assert outcome.kind == "exit" and outcome.result["changed"] is False
    assert outcome.result["versions"]["vllm_omni"] == "0.26.0"
    (call,) = calls
    assert call["argv"][:3] == ["timeout", "300", str(venv / "bin" / "python")]
    assert call["argv"][3] == "-c" and "def check(request" in call["argv"][4]
    assert call["request"]["expected_pd"] == {"pair": [0, 1], "bootstrap": "10.0.0.1:8998"}
    assert call["request"]["environment"] == {"VLLM_MOONCAKE_BOOTSTRAP_PORT": "8998"}


def test_omitted_expected_pd_is_not_compared(module_env):
    run, calls, _unused = module_env
    run(answer())
    assert "expected_pd" not in calls[0]["request"]


def test_problems_fail_with_every_one_named(module_env):
    run, _unused, _unused = module_env
    outcome = run(answer(["stage 0: Missing key final_output_type", "x.y cannot be imported"]))
    assert outcome.kind == "fail"
    assert "would not run: stage 0: Missing key final_output_type; x.y cannot be imported" in outcome.result["msg"]


def test_engine_that_does_not_answer_fails_with_its_output(module_env):
    run, _unused, _unused = module_env
    outcome = run(stdout="Traceback ...\nImportError: libcudart.so.13", rc=1)
    assert outcome.kind == "fail" and "could not run the config check (rc=1)" in outcome.result["msg"]
    assert "stderr tail" in outcome.result["msg"]


def test_missing_venv_says_to_install_it_first(module_env, tmp_path):
    run, calls, _unused = module_env
    outcome = run(answer(), venv=str(tmp_path / "nowhere"))
    assert outcome.kind == "fail" and "install the engine venv first" in outcome.result["msg"]
    assert calls == []
