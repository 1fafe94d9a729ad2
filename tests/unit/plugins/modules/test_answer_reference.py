"""answer_reference: a pipeline's answer against the reference its host keeps (the answer check)."""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.vllm_omni.serve.plugins.modules import answer_reference

RIGHT, WRONG = "Red, green and blue. Red and green make yellow.", "Yellow yellow yellow yellow"


class Exit(Exception):
    def __init__(self, kind, result):
        super().__init__(kind)
        self.kind, self.result = kind, result


@pytest.fixture
def run(monkeypatch, tmp_path):
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", lambda self, **kw: (_never for _never in ()).throw(Exit("exit", kw)))
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", lambda self, **kw: (_never for _never in ()).throw(Exit("fail", kw)))
    path = tmp_path / "state" / "answers.json"

    def call(answers, key="k1", renew=False, check_mode=False):
        args = {"path": str(path), "key": key, "answers": answers, "renew": renew, "identity": {"model": "m"}}
        if check_mode:
            args["_ansible_check_mode"] = True
        with patch_module_args(args), pytest.raises(Exit) as done:
            answer_reference.main()
        return done.value.result

    return call, path


def test_a_first_deploy_records_the_answer_its_pipelines_agree_on(run):
    call, path = run
    result = call({"h/omni0": RIGHT, "h/omni1": RIGHT})
    assert result["changed"] and result["recorded"]
    assert all(v["ok"] for v in result["verdicts"].values())
    stored = json.loads(path.read_text())["references"]["k1"]
    assert stored["answer"] == RIGHT and stored["pipelines"] == ["h/omni0", "h/omni1"] and stored["identity"] == {"model": "m"}
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"


def test_a_pipeline_that_answers_otherwise_fails_with_both_texts(run):
    call, path = run
    call({"h/omni0": RIGHT})
    before = path.read_text()
    result = call({"h/omni0": RIGHT, "h/omni1": WRONG})
    assert not result["changed"] and path.read_text() == before
    assert result["verdicts"]["h/omni0"]["ok"] is True
    wrong = result["verdicts"]["h/omni1"]
    assert wrong == {"ok": False, "answer": WRONG, "reference": RIGHT,
                     "reason": "answered differently from the reference"}
    assert result["reference"]["answer"] == RIGHT


def test_disagreeing_pipelines_without_a_reference_all_fail_and_record_nothing(run):
    call, path = run
    result = call({"h/omni0": RIGHT, "h/omni1": WRONG})
    assert not result["recorded"] and not path.exists()
    assert not any(v["ok"] for v in result["verdicts"].values())
    assert "no reference" in result["verdicts"]["h/omni1"]["reason"]


def test_no_answer_fails_and_keys_keep_their_own_references(run):
    call, path = run
    call({"h/omni0": RIGHT}, key="k1")
    result = call({"h/omni0": None}, key="k2")
    assert result["verdicts"]["h/omni0"]["ok"] is False and not result["recorded"]
    call({"h/omni0": WRONG}, key="k2")  # another model or engine: its own reference
    references = json.loads(path.read_text())["references"]
    assert (references["k1"]["answer"], references["k2"]["answer"]) == (RIGHT, WRONG)


def test_renew_replaces_the_reference_only_when_the_pipelines_agree(run):
    call, path = run
    call({"h/omni0": RIGHT})
    assert call({"h/omni0": WRONG, "h/omni1": RIGHT}, renew=True)["recorded"] is False
    result = call({"h/omni0": WRONG, "h/omni1": WRONG}, renew=True)
    assert result["recorded"] and all(v["ok"] for v in result["verdicts"].values())
    assert json.loads(path.read_text())["references"]["k1"]["answer"] == WRONG


def test_check_mode_judges_and_writes_nothing(run):
    call, path = run
    result = call({"h/omni0": RIGHT}, check_mode=True)
    assert result["recorded"] and not path.exists()


def test_an_unreadable_file_is_replaced_with_a_warning(run, monkeypatch):
    call, path = run
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, text: warned.append(text))
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    result = call({"h/omni0": RIGHT})
    assert result["recorded"] and any("could not be read" in w for w in warned)
    assert json.loads(path.read_text())["references"]["k1"]["answer"] == RIGHT
