"""The per-stage checks: stage overrides, shared GPU memory, and the engine's own rules over the stages' values."""

from __future__ import annotations

import dataclasses

import pytest
from unitlib import one_host, problems_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host import _engine_data
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _stage_checks
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._deployment import Deployment
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import ALL_HOSTS, Problems
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._validate import deployment_settings

ENGINE_ARGS = "vllm_omni_stage_engine_args"
SAMPLING = "vllm_omni_stage_sampling_params"
TEMPERATURE_RULE = '"temperature must be in [0, 2]" (vllm/sampling_params.py SamplingParams._verify_args)'


def settings(**values) -> dict:
    """The validated deployment settings of one engine host that sets ``values`` (defaults for the rest)."""
    problems = Problems()
    result, _sources = deployment_settings(["gpu-a"], {"gpu-a": values}, problems)
    assert problems.items == []
    return result


def overrides_of(**values) -> tuple[dict, list[str]]:
    """(stage_overrides' result, the problem lines it added)."""
    problems = Problems()
    chosen = settings(**values)
    result = _stage_checks.stage_overrides(chosen, chosen["vllm_omni_layout"], problems)
    return result, [p.line() for p in problems.items]


def deployment(overrides: dict | None = None, planner_shares: list[str] | None = None, **values) -> Deployment:
    """A Deployment as _validate makes it; ``overrides`` replaces the checked overrides where given."""
    chosen = settings(**values)
    layout = chosen["vllm_omni_layout"]
    if overrides is None:
        problems = Problems()
        overrides = _stage_checks.stage_overrides(chosen, layout, problems)
        assert problems.items == []
        overrides, planner_shares = _stage_checks.shared_gpu_split(chosen, layout, overrides)
    else:
        roles = {"pd": ("prefill", "decode", "talker", "code2wav"), "aggregated": ("thinker", "talker", "code2wav")}[layout]
        overrides = {role: {"engine_args": {}, "sampling": {}, **overrides.get(role, {})} for role in roles}
    engine = _engine_data.support_table()[chosen["vllm_omni_version"]]
    return Deployment(chosen, {}, engine, overrides, planner_shares or [])


def engine_rule_lines(context: Deployment) -> list[str]:
    problems = Problems()
    _stage_checks.check_engine_rules(context, problems)
    assert all(p.where == ALL_HOSTS for p in problems.items)
    return [p.line() for p in problems.items]


def gpu_memory_lines(context: Deployment) -> list[str]:
    problems = Problems()
    _stage_checks.check_gpu_memory(context, problems)
    return [p.line() for p in problems.items]


def empty(*roles: str) -> dict:
    return {role: {"engine_args": {}, "sampling": {}} for role in roles}


# --- stage overrides ----------------------------------------------------------------------------


@pytest.mark.parametrize(("values", "roles"), [
    ({}, ("prefill", "decode", "talker", "code2wav")),
    ({"vllm_omni_audio_output": False}, ("prefill", "decode")),
    ({"vllm_omni_layout": "aggregated"}, ("thinker", "talker", "code2wav")),
    ({"vllm_omni_layout": "aggregated", "vllm_omni_audio_output": False}, ("thinker",)),
])
def test_no_overrides_give_an_empty_entry_for_each_stage_of_the_layout(values, roles):
    assert overrides_of(**values) == (empty(*roles), [])


def test_overrides_land_on_their_stage_and_kind():
    result, lines = overrides_of(**{ENGINE_ARGS: {"decode": {"max_num_seqs": 32, "enforce_eager": True}},
                                    SAMPLING: {"talker": {"temperature": 0.7, "stop_token_ids": [2150]}}})
    assert lines == []
    assert result == {**empty("prefill", "code2wav"),
                      "decode": {"engine_args": {"max_num_seqs": 32, "enforce_eager": True}, "sampling": {}},
                      "talker": {"engine_args": {}, "sampling": {"temperature": 0.7, "stop_token_ids": [2150]}}}


def test_thinker_in_pd_sets_both_thinker_stages_and_a_role_entry_wins_over_it():
    result, lines = overrides_of(**{ENGINE_ARGS: {"decode": {"max_num_seqs": 16},
                                                  "thinker": {"max_num_seqs": 8, "enforce_eager": True}}})
    assert lines == []
    assert result["prefill"]["engine_args"] == {"max_num_seqs": 8, "enforce_eager": True}
    assert result["decode"]["engine_args"] == {"max_num_seqs": 16, "enforce_eager": True}
    assert result["talker"] == result["code2wav"] == {"engine_args": {}, "sampling": {}}


@pytest.mark.parametrize(("values", "line"), [
    ({ENGINE_ARGS: {"thinkr": {"max_num_seqs": 8}}},
     f"{ALL_HOSTS}: {ENGINE_ARGS}.thinkr names no stage of the pd layout "
     "-> use one of: prefill, decode, talker, code2wav, thinker"),
    ({SAMPLING: {"talker": {"temperature": 0.5}}, "vllm_omni_audio_output": False},
     f"{ALL_HOSTS}: {SAMPLING}.talker names no stage of the text-only (vllm_omni_audio_output: false) pd layout "
     "-> use one of: prefill, decode, thinker"),
    ({ENGINE_ARGS: {"prefill": {"max_num_seqs": 8}}, "vllm_omni_layout": "aggregated"},
     f"{ALL_HOSTS}: {ENGINE_ARGS}.prefill names no stage of the aggregated layout -> use one of: thinker, talker, code2wav"),
])
def test_an_override_for_a_stage_the_layout_lacks_is_refused_with_the_stages_it_has(values, line):
    result, lines = overrides_of(**values)
    assert lines == [line]
    assert all(entry == {"engine_args": {}, "sampling": {}} for entry in result.values())


def test_a_stage_entry_that_is_not_a_mapping_is_refused_with_an_example():
    result, lines = overrides_of(**{ENGINE_ARGS: {"decode": 5, "prefill": {"max_num_seqs": 4}}})
    assert lines == [f"{ALL_HOSTS}: {ENGINE_ARGS}.decode must be a mapping, got 5 "
                     f"-> write e.g. {ENGINE_ARGS}: {{decode: {{...}}}}"]
    assert result["prefill"]["engine_args"] == {"max_num_seqs": 4}
    assert result["decode"]["engine_args"] == {}


@pytest.mark.parametrize(("setting", "key", "fix"), [
    (ENGINE_ARGS, "devices", "vllm_omni_gpus (the planner places stages on GPUs; vllm_omni_share_gpus puts them on one)"),
    (ENGINE_ARGS, "kv_transfer_config", "the planner (kv_ip, engine_id, roles and ports come from the inventory)"),
    (ENGINE_ARGS, "data_parallel_size", "vllm_omni_pipelines_per_host (one pipeline = one replica)"),
    (ENGINE_ARGS, "model_stage", "the engine's pipeline definition"),
    (SAMPLING, "detokenize", "the engine's pipeline definition (each stage's sampling constraints)"),
])
def test_a_key_the_planner_owns_is_refused_with_the_setting_to_use(setting, key, fix):
    result, lines = overrides_of(**{setting: {"decode": {key: "x", "seed": 7}}})
    assert lines == [f"{ALL_HOSTS}: {setting}.decode.{key} is computed by the collection and cannot be overridden "
                     f"-> set it through {fix}"]
    kind = "engine_args" if setting == ENGINE_ARGS else "sampling"
    assert result["decode"][kind] == {"seed": 7}


@pytest.mark.parametrize(("setting", "key", "fix"), [
    (ENGINE_ARGS, "max_num_seq", "did you mean max_num_seqs?"),
    (ENGINE_ARGS, "gpu_memory_utilisation", "did you mean gpu_memory_utilization?"),
    (SAMPLING, "temprature", "did you mean temperature?"),
    (SAMPLING, "max_token", "did you mean max_tokens?"),
])
def test_a_misspelled_key_is_refused_with_the_closest_overridable_name(setting, key, fix):
    result, lines = overrides_of(**{setting: {"talker": {key: 1}}})
    assert lines == [f"{ALL_HOSTS}: {setting}.talker.{key} is not an overridable setting -> {fix}"]
    assert result["talker"] == {"engine_args": {}, "sampling": {}}


def test_an_unknown_key_with_no_close_name_lists_every_overridable_key():
    _result, lines = overrides_of(**{SAMPLING: {"talker": {"zzz": 1}}})
    assert lines == [f"{ALL_HOSTS}: {SAMPLING}.talker.zzz is not an overridable setting -> overridable: "
                     "frequency_penalty, max_tokens, min_p, presence_penalty, repetition_penalty, seed, stop_token_ids, "
                     "temperature, top_k, top_p"]


def test_a_sampling_key_given_as_an_engine_argument_is_not_overridable_there():
    _result, lines = overrides_of(**{ENGINE_ARGS: {"talker": {"top_p": 0.5}}})
    assert len(lines) == 1
    assert lines[0].startswith(f"{ALL_HOSTS}: {ENGINE_ARGS}.talker.top_p is not an overridable setting -> ")


@pytest.mark.parametrize(("setting", "key", "value", "problem"), [
    (ENGINE_ARGS, "block_size", 12, "is 12; the KV-cache block size must be 8, 16, 32, 64 or 128"),
    (ENGINE_ARGS, "gpu_memory_utilization", 1.5, "is 1.5, must be in (0.0, 1.0]"),
    (ENGINE_ARGS, "gpu_memory_utilization", 0, "is 0.0, must be in (0.0, 1.0]"),
    (ENGINE_ARGS, "max_num_seqs", 0, "is 0, must be between 1 and 65536"),
    (ENGINE_ARGS, "dtype", "fp4", 'is "fp4", must be one of auto, bfloat16, float16, half, float32, float'),
    (SAMPLING, "stop_token_ids", 5, "must be a list of token ids, got 5"),
    (SAMPLING, "top_k", -2, "is -2, must be between -1 and 1000000"),
])
def test_an_override_value_its_checker_refuses_is_reported_under_the_stage_key(setting, key, value, problem):
    result, lines = overrides_of(**{setting: {"decode": {key: value}}})
    assert len(lines) == 1
    assert lines[0].startswith(f"{ALL_HOSTS}: {setting}.decode.{key} {problem} -> ")
    assert result["decode"] == {"engine_args": {}, "sampling": {}}


def test_every_refused_key_is_reported_and_the_valid_ones_are_kept():
    result, lines = overrides_of(**{ENGINE_ARGS: {"decode": {"devices": "0", "max_num_seq": 4, "max_num_seqs": 4,
                                                             "block_size": 3}}})
    assert [line.split(" ")[3] for line in lines] == [f"{ENGINE_ARGS}.decode.block_size", f"{ENGINE_ARGS}.decode.devices",
                                                      f"{ENGINE_ARGS}.decode.max_num_seq"]
    assert result["decode"]["engine_args"] == {"max_num_seqs": 4}


def test_tensor_parallel_size_per_pd_stage_that_differs_names_both_sizes():
    result, lines = overrides_of(**{ENGINE_ARGS: {"prefill": {"tensor_parallel_size": 2}}})
    assert lines == [f"{ALL_HOSTS}: {ENGINE_ARGS} sets tensor_parallel_size per stage (prefill 2, decode 1); "
                     "MooncakeConnector needs prefill and decode equal, and the engine refuses the pair otherwise "
                     "-> remove tensor_parallel_size from the stage overrides and set vllm_omni_tensor_parallel_size"]
    assert all("tensor_parallel_size" not in entry["engine_args"] for entry in result.values())


def test_tensor_parallel_size_per_stage_compares_with_the_deployment_size():
    _result, lines = overrides_of(**{ENGINE_ARGS: {"decode": {"tensor_parallel_size": 1}},
                                     "vllm_omni_tensor_parallel_size": 2})
    assert len(lines) == 1
    assert "sets tensor_parallel_size per stage (prefill 2, decode 1)" in lines[0]


@pytest.mark.parametrize("values", [
    {ENGINE_ARGS: {"thinker": {"tensor_parallel_size": 2}}},
    {ENGINE_ARGS: {"prefill": {"tensor_parallel_size": 2}, "decode": {"tensor_parallel_size": 2}}},
    {ENGINE_ARGS: {"talker": {"tensor_parallel_size": 2}}},
    {ENGINE_ARGS: {"thinker": {"tensor_parallel_size": 2}}, "vllm_omni_layout": "aggregated"},
])
def test_tensor_parallel_size_in_any_stage_override_is_refused_once_as_derived(values):
    result, lines = overrides_of(**values)
    assert lines == [f"{ALL_HOSTS}: {ENGINE_ARGS} sets tensor_parallel_size, which the planner derives "
                     "-> set vllm_omni_tensor_parallel_size instead"]
    assert all(entry["engine_args"] == {} for entry in result.values())


def test_tensor_parallel_size_as_a_sampling_parameter_is_only_not_overridable():
    _result, lines = overrides_of(**{SAMPLING: {"decode": {"tensor_parallel_size": 2}}})
    assert len(lines) == 1
    assert lines[0].startswith(f"{ALL_HOSTS}: {SAMPLING}.decode.tensor_parallel_size is not an overridable setting")


# --- shared GPU memory split --------------------------------------------------------------------


def test_without_shared_gpus_the_overrides_pass_unchanged_and_the_planner_chooses_no_share():
    chosen = settings()
    overrides = empty("prefill", "decode", "talker", "code2wav")
    result, chosen_roles = _stage_checks.shared_gpu_split(chosen, "pd", overrides)
    assert result == empty("prefill", "decode", "talker", "code2wav")
    assert chosen_roles == []


def test_shared_gpus_give_each_pd_stage_its_share_unless_the_user_set_one():
    chosen = settings(vllm_omni_share_gpus=True)
    overrides = empty("prefill", "decode", "talker", "code2wav")
    overrides["decode"]["engine_args"]["gpu_memory_utilization"] = 0.3
    result, chosen_roles = _stage_checks.shared_gpu_split(chosen, "pd", overrides)
    assert {role: entry["engine_args"]["gpu_memory_utilization"] for role, entry in result.items()} == {
        "prefill": 0.25, "decode": 0.3, "talker": 0.2, "code2wav": 0.1}
    assert chosen_roles == ["prefill", "talker", "code2wav"]


@pytest.mark.parametrize(("values", "shares"), [
    ({"vllm_omni_audio_output": False}, {"prefill": 0.4, "decode": 0.5}),
    ({"vllm_omni_layout": "aggregated"}, {"thinker": 0.6, "talker": 0.2, "code2wav": 0.1}),
    ({"vllm_omni_layout": "aggregated", "vllm_omni_audio_output": False}, {}),
])
def test_shared_gpu_shares_follow_the_layout_and_audio(values, shares):
    context = deployment(vllm_omni_share_gpus=True, **values)
    assert {role: e["engine_args"]["gpu_memory_utilization"] for role, e in context.overrides.items()
            if "gpu_memory_utilization" in e["engine_args"]} == shares
    assert context.planner_shares == list(shares)


# --- GPU memory per physical GPU ----------------------------------------------------------------


def test_the_engine_defaults_of_a_pd_pipeline_fit_each_gpu():
    assert gpu_memory_lines(deployment()) == []


def test_stages_on_one_gpu_that_claim_more_than_the_budget_are_refused_with_their_shares():
    context = deployment(**{ENGINE_ARGS: {"talker": {"gpu_memory_utilization": 0.9}}})
    assert gpu_memory_lines(context) == [
        f"{ALL_HOSTS}: {ENGINE_ARGS} puts stages on one GPU (pipeline GPU 2) whose gpu_memory_utilization adds up to 1 "
        "(talker 0.9 + code2wav 0.1); each stage's engine claims its share of the whole GPU at start-up, so the last one "
        "to start would find too little free memory -> lower those stages' gpu_memory_utilization so they add up to at "
        "most 0.95"]


def test_shares_adding_up_to_exactly_the_budget_are_accepted():
    context = deployment(**{ENGINE_ARGS: {"talker": {"gpu_memory_utilization": 0.85}}})
    assert gpu_memory_lines(context) == []
    over = deployment(**{ENGINE_ARGS: {"talker": {"gpu_memory_utilization": 0.86}}})
    assert len(gpu_memory_lines(over)) == 1


def test_one_stage_alone_on_its_gpu_may_claim_all_of_it():
    context = deployment(**{ENGINE_ARGS: {"prefill": {"gpu_memory_utilization": 1.0},
                                          "decode": {"gpu_memory_utilization": 1.0}}})
    assert gpu_memory_lines(context) == []


def test_shared_tensor_parallel_gpus_are_each_checked_for_the_stages_placed_on_them():
    """Shared TP 2: prefill and decode span GPUs 0 and 1, talker and code2wav sit on GPU 0 only."""
    fits_on_1 = deployment(vllm_omni_share_gpus=True, vllm_omni_tensor_parallel_size=2,
                           **{ENGINE_ARGS: {"decode": {"gpu_memory_utilization": 0.5}}})
    (line,) = gpu_memory_lines(fits_on_1)
    assert "(pipeline GPU 0) whose gpu_memory_utilization adds up to 1.05 (prefill 0.25 + decode 0.5 + talker 0.2 + " \
           "code2wav 0.1)" in line
    both = deployment(vllm_omni_share_gpus=True, vllm_omni_tensor_parallel_size=2,
                      **{ENGINE_ARGS: {"decode": {"gpu_memory_utilization": 0.8}}})
    lines = gpu_memory_lines(both)
    assert len(lines) == 2
    assert "(pipeline GPU 0) whose gpu_memory_utilization adds up to 1.35 (prefill 0.25 + decode 0.8 + talker 0.2 + " \
           "code2wav 0.1)" in lines[0]
    assert "(pipeline GPU 1) whose gpu_memory_utilization adds up to 1.05 (prefill 0.25 + decode 0.8);" in lines[1]


def test_the_planners_shared_split_fits_the_budget_for_every_layout():
    for values in ({}, {"vllm_omni_audio_output": False}, {"vllm_omni_layout": "aggregated"}):
        assert gpu_memory_lines(deployment(vllm_omni_share_gpus=True, **values)) == [], values


def test_aggregated_on_the_deploy_schema_uses_that_versions_stage_memory():
    context = deployment(vllm_omni_version="0.30.0", vllm_omni_layout="aggregated",
                         **{ENGINE_ARGS: {"code2wav": {"gpu_memory_utilization": 0.4}}})
    (line,) = gpu_memory_lines(context)
    assert "(pipeline GPU 1) whose gpu_memory_utilization adds up to 1 (talker 0.6 + code2wav 0.4)" in line


def test_the_gpu_memory_problem_reaches_the_plan_errors():
    lines = problems_of(one_host(**{ENGINE_ARGS: {"code2wav": {"gpu_memory_utilization": 0.9}}}))
    assert any("(pipeline GPU 2) whose gpu_memory_utilization adds up to 1.5 (talker 0.6 + code2wav 0.9)" in line
               for line in lines), lines


# --- the engine's own rules ---------------------------------------------------------------------


def test_a_temperature_the_planner_allows_but_the_engine_refuses_is_refused_with_the_engines_words():
    context = deployment(**{SAMPLING: {"talker": {"temperature": 3.0}}})
    assert engine_rule_lines(context) == [
        f"{ALL_HOSTS}: {SAMPLING}.talker.temperature is 3.0, which vLLM 0.26.0 refuses: {TEMPERATURE_RULE} "
        f"-> set {SAMPLING}.talker.temperature to a value the engine accepts, or remove it (the stage's default is 0.9)"]


def test_the_engines_closed_bounds_accept_their_ends():
    context = deployment(**{SAMPLING: {"talker": {"temperature": 2.0, "top_k": -1, "min_p": 1.0},
                                       "code2wav": {"presence_penalty": -2.0, "frequency_penalty": 2.0}}})
    assert engine_rule_lines(context) == []


def test_a_refused_value_of_a_key_the_stage_has_no_default_for_points_at_the_engine_s_own_default():
    overrides = empty("prefill", "decode", "talker", "code2wav")
    overrides["code2wav"]["sampling"]["min_p"] = 1.5  # past the planner's own range: the engine's rule alone here
    context = deployment(overrides=overrides)
    (line,) = engine_rule_lines(context)
    assert line.startswith(f"{ALL_HOSTS}: {SAMPLING}.code2wav.min_p is 1.5, which vLLM 0.26.0 refuses"), line
    assert line.endswith("or remove it (the stage's default is the engine's own default)"), line


def test_a_thinker_alias_value_is_refused_once_under_the_alias():
    context = deployment(**{SAMPLING: {"thinker": {"temperature": 2.5}}})
    assert engine_rule_lines(context) == [
        f"{ALL_HOSTS}: {SAMPLING}.thinker.temperature is 2.5, which vLLM 0.26.0 refuses: {TEMPERATURE_RULE} "
        f"-> set {SAMPLING}.thinker.temperature to a value the engine accepts, or remove it (the stage's default is 0.0)"]


def test_a_role_value_under_an_alias_is_named_by_the_role_that_set_it():
    context = deployment(**{SAMPLING: {"thinker": {"temperature": 0.5}, "decode": {"temperature": 2.5}}})
    (line,) = engine_rule_lines(context)
    assert line.startswith(f"{ALL_HOSTS}: {SAMPLING}.decode.temperature is 2.5, which vLLM 0.26.0 refuses")


@pytest.mark.parametrize(("role", "sampling", "line_start", "default"), [
    ("talker", {"top_k": -2}, "top_k is -2, which vLLM 0.26.0 refuses: \"top_k must be 0 (disable), or at least 1\"", "50"),
    ("code2wav", {"top_p": 0.0}, "top_p is 0.0, which vLLM 0.26.0 refuses: \"top_p must be in (0, 1]\"", "1.0"),
    ("talker", {"repetition_penalty": 0.0}, "repetition_penalty is 0.0, which vLLM 0.26.0 refuses", "1.05"),
    ("talker", {"max_tokens": 0}, "max_tokens is 0, which vLLM 0.26.0 refuses: \"max_tokens must be at least 1\"", "4096"),
])
def test_each_engine_bound_refuses_the_value_beyond_it_with_the_stage_default(role, sampling, line_start, default):
    """Values only a hand-made context can hold (the planner's ranges refuse them first): the engine's bound kinds."""
    lines = engine_rule_lines(deployment(overrides={role: {"sampling": sampling}}))
    assert len(lines) == 1
    key = next(iter(sampling))
    assert lines[0].startswith(f"{ALL_HOSTS}: {SAMPLING}.{role}.{line_start}")
    assert lines[0].endswith(f"(the stage's default is {default})")
    assert f"-> set {SAMPLING}.{role}.{key} to a value the engine accepts" in lines[0]


def test_a_gpu_memory_share_the_planner_chose_is_not_held_to_the_engines_bound():
    bad = {"decode": {"engine_args": {"gpu_memory_utilization": 1.5}}}
    refused = engine_rule_lines(deployment(overrides=bad))
    assert len(refused) == 1
    assert refused[0].startswith(f"{ALL_HOSTS}: {ENGINE_ARGS}.decode.gpu_memory_utilization is 1.5, which vLLM 0.26.0 "
                                 "refuses: \"gpu_memory_utilization must be in (0, 1]\"")
    assert refused[0].endswith("(the stage's default is 0.9)")
    assert engine_rule_lines(deployment(overrides=bad, planner_shares=["decode"])) == []


@pytest.mark.parametrize(("bound", "outside", "inside"), [
    ({"allowed": ["auto", "fp8"]}, ["fp4", 1], ["auto", "fp8"]),
    ({"min": 0, "max": 1, "max_open": True}, [1, 1.5, -0.1], [0, 0.999]),
    ({"min": 0, "min_open": True}, [0, -1], [0.001, 10**9]),
    ({"min": 1}, [0, 0.5], [1, 2]),
])
def test_the_bound_kinds_of_an_engine_rule(monkeypatch, bound, outside, inside):
    rule = {**bound, "rule": "x  must\n fit", "checked_by": "engine.py Check"}
    monkeypatch.setattr(_engine_data, "engine_rules", lambda version: {"engine_args": {"max_num_seqs": rule}})
    for value in outside:
        lines = engine_rule_lines(deployment(overrides={"talker": {"engine_args": {"max_num_seqs": value}}}))
        assert len(lines) == 1, value
        assert 'which vLLM 0.26.0 refuses: "x must fit" (engine.py Check)' in lines[0]
    for value in inside:
        assert engine_rule_lines(deployment(overrides={"talker": {"engine_args": {"max_num_seqs": value}}})) == [], value


def test_a_boolean_or_text_is_never_outside_a_numeric_bound(monkeypatch):
    rule = {"min": 5, "rule": "r", "checked_by": "c"}
    monkeypatch.setattr(_engine_data, "engine_rules", lambda version: {"engine_args": {"enforce_eager": rule}})
    for value in (True, False, "3"):
        assert engine_rule_lines(deployment(overrides={"talker": {"engine_args": {"enforce_eager": value}}})) == []


def test_a_version_without_engine_rules_checks_nothing():
    context = deployment(overrides={"talker": {"sampling": {"temperature": 50.0}}})
    unknown = dataclasses.replace(context, engine=dataclasses.replace(context.engine, version="0.0.1"))
    assert engine_rule_lines(context) != []
    assert engine_rule_lines(unknown) == []


def test_the_deploy_schema_takes_the_stage_defaults_by_stage_id():
    context = deployment(vllm_omni_version="0.30.0", vllm_omni_layout="aggregated",
                         **{SAMPLING: {"talker": {"temperature": 2.5}, "thinker": {"temperature": 2.5}}})
    lines = engine_rule_lines(context)
    assert [line.split(" ")[3] for line in lines] == [f"{SAMPLING}.thinker.temperature", f"{SAMPLING}.talker.temperature"]
    assert lines[0].endswith("(the stage's default is 0.0)") and "vLLM 0.30.0 refuses" in lines[0]
    assert lines[1].endswith("(the stage's default is 0.9)")


# --- the engine's rules between the arguments of one stage ---------------------------------------------


def model_len_rule(batched: int, model_len: int) -> str:
    return (f'"max_num_batched_tokens ({batched}) is smaller than max_model_len ({model_len}). This effectively limits the '
            "maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            'max_num_batched_tokens or decrease max_model_len." (vllm/config/scheduler.py '
            "SchedulerConfig.verify_max_model_len (chunked prefill disabled))")


def test_fewer_batched_tokens_than_the_models_context_without_chunked_prefill_is_refused():
    context = deployment(**{ENGINE_ARGS: {"code2wav": {"max_num_batched_tokens": 32768}}})
    assert engine_rule_lines(context) == [
        f"{ALL_HOSTS}: {ENGINE_ARGS}.code2wav.max_num_batched_tokens leaves the code2wav stage with max_num_batched_tokens "
        "32768 below max_model_len 65536 and chunked prefill off, which vLLM 0.26.0 refuses at start-up: "
        + model_len_rule(32768, 65536)
        + f" -> in {ENGINE_ARGS}.code2wav raise max_num_batched_tokens to at least 65536, set max_model_len to at most it, "
        "or set enable_chunked_prefill: true"]


@pytest.mark.parametrize(("args", "key", "batched", "model_len"), [
    ({"enable_chunked_prefill": False}, "enable_chunked_prefill", 32768, 65536),
    ({"enable_chunked_prefill": False, "max_model_len": 40000}, "max_model_len", 32768, 40000),
    ({"enable_chunked_prefill": False, "max_num_batched_tokens": 4096, "max_model_len": 8192}, "max_num_batched_tokens",
     4096, 8192),
])
def test_the_model_len_rule_names_the_key_the_user_touched(args, key, batched, model_len):
    (line,) = engine_rule_lines(deployment(**{ENGINE_ARGS: {"decode": args}}))
    assert line.startswith(f"{ALL_HOSTS}: {ENGINE_ARGS}.decode.{key} leaves the decode stage with max_num_batched_tokens "
                           f"{batched} below max_model_len {model_len} and chunked prefill off")
    assert model_len_rule(batched, model_len) in line


@pytest.mark.parametrize("args", [
    {"enable_chunked_prefill": False, "max_model_len": 32768},
    {"max_num_batched_tokens": 1024},
    {"enable_chunked_prefill": True, "max_num_batched_tokens": 1024},
    {"enable_chunked_prefill": False, "max_num_batched_tokens": 65536},
])
def test_the_model_len_rule_accepts_enough_batched_tokens_or_chunked_prefill(args):
    assert engine_rule_lines(deployment(**{ENGINE_ARGS: {"decode": args}})) == []


def test_the_model_len_rule_is_silent_for_a_model_whose_context_is_unknown():
    context = deployment(vllm_omni_model="acme/other-model", **{ENGINE_ARGS: {"decode": {"enable_chunked_prefill": False}}})
    assert engine_rule_lines(context) == []


def test_the_engines_own_code2wav_values_are_not_refused_when_the_user_touches_none_of_them():
    context = deployment(**{ENGINE_ARGS: {"code2wav": {"enforce_eager": True, "max_num_seqs": 8}}})
    assert engine_rule_lines(context) == []


@pytest.mark.parametrize(("args", "key", "batched", "seqs"), [
    ({"max_num_batched_tokens": 32}, "max_num_batched_tokens", 32, 64),
    ({"max_num_seqs": 40000}, "max_num_seqs", 32768, 40000),
    ({"max_num_seqs": 100, "max_num_batched_tokens": 50}, "max_num_batched_tokens", 50, 100),
])
def test_fewer_batched_tokens_than_sequences_is_refused_naming_the_key(args, key, batched, seqs):
    (line,) = engine_rule_lines(deployment(**{ENGINE_ARGS: {"talker": args}}))
    assert line == (
        f"{ALL_HOSTS}: {ENGINE_ARGS}.talker.{key} leaves the talker stage with max_num_batched_tokens {batched} below "
        f"max_num_seqs {seqs}, which vLLM 0.26.0 refuses at start-up: \"max_num_batched_tokens ({batched}) must be "
        f"greater than or equal to max_num_seqs ({seqs}).\" (vllm/config/scheduler.py SchedulerConfig.verify_max_model_len) "
        f"-> in {ENGINE_ARGS}.talker raise max_num_batched_tokens to at least {seqs} or lower max_num_seqs")


def test_a_key_that_breaks_two_rules_is_reported_once_with_the_first():
    (line,) = engine_rule_lines(deployment(**{ENGINE_ARGS: {"code2wav": {"max_num_batched_tokens": 32}}}))
    assert "below max_model_len 65536 and chunked prefill off" in line


def test_a_thinker_alias_breaking_a_rule_in_both_thinker_stages_is_reported_once():
    lines = engine_rule_lines(deployment(**{ENGINE_ARGS: {"thinker": {"max_num_batched_tokens": 32}}}))
    assert len(lines) == 1
    assert lines[0].startswith(f"{ALL_HOSTS}: {ENGINE_ARGS}.thinker.max_num_batched_tokens leaves the prefill stage with "
                               "max_num_batched_tokens 32 below max_num_seqs 64")
    # The fix points at the entry the user wrote, not at the stage it stands for.
    assert lines[0].endswith(f"-> in {ENGINE_ARGS}.thinker raise max_num_batched_tokens to at least 64 or lower "
                             "max_num_seqs")


def test_an_engine_rule_problem_reaches_the_plan_errors():
    lines = problems_of(one_host(**{SAMPLING: {"talker": {"temperature": 3.0}}}))
    assert lines == [f"{ALL_HOSTS}: {SAMPLING}.talker.temperature is 3.0, which vLLM 0.26.0 refuses: {TEMPERATURE_RULE} "
                     f"-> set {SAMPLING}.talker.temperature to a value the engine accepts, or remove it (the stage's default "
                     "is 0.9)"]
