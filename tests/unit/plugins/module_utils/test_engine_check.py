"""The engine-side checker's pure parts (the engine-dependent parts run in tests/conformance)."""

from __future__ import annotations

from ansible_collections.vllm_omni.serve.plugins.module_utils import _engine_check


def facts(**overrides):
    answer = {"problems": [], "stages": [{"id": 0, "model_stage": "thinker", "devices": "0"},
                                         {"id": 1, "model_stage": "thinker", "devices": "1"}],
              "pd_pair": [0, 1], "pd_bootstrap_addr": "10.0.0.1:8998", "runtime_bootstrap_addr": "http://10.0.0.1:8998"}
    answer.update(overrides)
    return answer


def test_matching_answer_has_no_problems():
    answer = facts()
    _engine_check._compare(answer, {"expected_stages": [{"id": 0, "devices": "0"}, {"id": 1, "devices": "1"}],
                                    "expected_pd": {"pair": [0, 1], "bootstrap": "10.0.0.1:8998"}})
    assert answer["problems"] == []


def test_stage_count_devices_and_bootstrap_mismatches_are_named():
    answer = facts(runtime_bootstrap_addr="http://10.0.0.1:9999")
    _engine_check._compare(answer, {"expected_stages": [{"id": 0, "devices": "0,1"}],
                                    "expected_pd": {"pair": [0, 1], "bootstrap": "10.0.0.1:8998"}})
    text = "\n".join(answer["problems"])
    assert "the engine resolved 2 stages, the plan has 1" in text
    assert "stage 0: engine resolved devices='0', the plan says '0,1'" in text
    assert "the orchestrator would hand decode 'http://10.0.0.1:9999'" in text


def test_unexpected_pd_pair_is_a_problem():
    answer = facts()
    _engine_check._compare(answer, {"expected_pd": {"pair": None}})
    assert answer["problems"] == ["the engine detected a prefill/decode pair [0, 1] the plan has not"]


def test_dotted_paths_are_found_anywhere_in_a_document():
    found = set()
    _engine_check._dotted_strings({"a": [{"b": "vllm_omni.x.y.z"}, "not.dotted path", "vllm.a.B"], "c": 3}, found)
    assert found == {"vllm_omni.x.y.z", "vllm.a.B"}


def test_answer_line_is_found_after_engine_logs():
    stdout = "INFO something\n" + _engine_check.MARKER + '{"answers": []}\nlate log line\n'
    assert _engine_check.parse_answer(stdout) == {"answers": []}
    assert _engine_check.parse_answer("no answer here") is None
