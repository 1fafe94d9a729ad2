"""The engine plugin's guards and its PD pipelines, without an engine (the conformance suite drives them through
vLLM-Omni itself: tests/conformance/test_engine_plugin.py).

Every supported version carries the plugin, so no engine venv shows a fix staying unarmed; here the installed
versions are whatever the test says.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

import pytest
from unitlib import REPO

PLUGIN = REPO / "roles" / "engine" / "files" / "engine_plugin" / "vllm_omni_serve_fixes.py"


@pytest.fixture()
def fixes(monkeypatch):
    spec = importlib.util.spec_from_file_location("vllm_omni_serve_fixes_under_test", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    finders = list(sys.meta_path)
    yield module
    sys.meta_path[:] = finders


@pytest.mark.parametrize("versions", [("0.28.0", "0.28.0"), ("0.26.0", "0.30.0"), ("0.30.0", "0.26.0"),
                                      ("0.32.0rc1", "0.32.0"), (None, None)])
def test_nothing_is_armed_under_a_pair_no_fix_was_proven_on(fixes, monkeypatch, versions):
    monkeypatch.setattr(fixes, "installed_versions", lambda: versions)
    before = list(sys.meta_path)
    assert not any(fixes.fixes_in_force(versions).values())
    fixes.register()
    assert sys.meta_path == before


@pytest.mark.parametrize("versions, armed", [
    (("0.26.0", "0.26.0"), {"vllm_omni.entrypoints.openai.serving_chat"}),
    (("0.30.0", "0.30.0"), {"vllm_omni.entrypoints.openai.serving_chat", "vllm_omni.config.pipeline_registry",
                            "vllm_omni.config.omni_config"}),
])
def test_each_proven_pair_arms_exactly_its_fixes_once(fixes, monkeypatch, versions, armed):
    monkeypatch.setattr(fixes, "installed_versions", lambda: versions)
    for module in armed:
        monkeypatch.delitem(sys.modules, module, raising=False)
    fixes.register()
    fixes.register()  # vLLM calls it in every process, sometimes twice: one finder per module
    found = [finder.name for finder in sys.meta_path if type(finder).__name__ == "_PatchOnImport"]
    assert sorted(found) == sorted(armed)


# Stand-ins for vLLM-Omni 0.30's frozen topology dataclasses (vllm_omni/config/stage_config.py), with the fields
# the PD pipelines change.
@dataclasses.dataclass(frozen=True)
class Stage:
    stage_id: int
    model_stage: str
    input_sources: tuple = ()
    final_output: bool = False
    final_output_type: str | None = None
    custom_process_next_stage_input_func: str | None = None
    async_chunk_process_next_stage_input_func: str | None = None
    extras: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Pipeline:
    model_type: str
    stages: tuple
    duplex_plugin: str | None = None
    default_session_mode: str | None = None
    default_deploy_config_name: str | None = None


ENGINE = Pipeline("qwen3_omni_moe", (
    Stage(0, "thinker", (), True, "text", "p.thinker2talker_full_payload", "p.thinker2talker_async_chunk"),
    Stage(1, "talker", (0,), False, None, "p.talker2code2wav_full_payload", "p.talker2code2wav_async_chunk"),
    Stage(2, "code2wav", (1,), True, "audio"),
), "duplex.Plugin", "turn", "qwen3_omni_moe.yaml")


def test_the_audio_pd_pipeline_is_the_engines_stages_with_the_thinker_split(fixes):
    pd = fixes.pd_pipeline("qwen3_omni_moe_pd", ENGINE)
    assert pd.model_type == "qwen3_omni_moe_pd" and pd.default_deploy_config_name is None and pd.duplex_plugin is None
    assert [(s.stage_id, s.model_stage, s.input_sources) for s in pd.stages] == [
        (0, "thinker", ()), (1, "thinker", (0,)), (2, "talker", (1,)), (3, "code2wav", (2,))]
    prefill, decode, talker, code2wav = pd.stages
    assert (prefill.final_output, prefill.custom_process_next_stage_input_func) == (False, None)
    assert prefill.extras[fixes.PD_MARKER] == "prefill" and decode.extras[fixes.PD_MARKER] == "decode"
    # decode feeds the talker exactly as the engine's thinker does; nothing streams in chunks (async_chunk false)
    assert decode.custom_process_next_stage_input_func == "p.thinker2talker_full_payload"
    assert (decode.final_output, decode.final_output_type) == (True, "text")
    assert talker.custom_process_next_stage_input_func == "p.talker2code2wav_full_payload"
    assert not any(s.async_chunk_process_next_stage_input_func for s in pd.stages)
    assert code2wav.final_output_type == "audio" and fixes.PD_MARKER not in talker.extras
    assert ENGINE.stages[0].extras == {}  # the engine's own pipeline is left as it was


def test_the_text_pd_pipeline_ends_at_decode(fixes):
    pd = fixes.pd_pipeline("qwen3_omni_moe_pd_text", ENGINE)
    assert [s.model_stage for s in pd.stages] == ["thinker", "thinker"]
    assert pd.stages[1].custom_process_next_stage_input_func is None and pd.stages[1].final_output


class TypedStage:
    """vLLM-Omni 0.30's BaseVllmOmniStageConfig as far as the PD attributes read it (subclassed per test: the
    patch changes the class)."""

    def __init__(self, marker=None, sources=()):
        extras = {"vllm_omni_serve_pd_role": marker} if marker else {}
        self.stage_pipeline_config = Stage(0, "thinker", tuple(sources), extras=extras)
        self.connector_config = type("Connector", (), {"kv_transfer_config": {"kv_role": "kv_producer"}})()
        self.parallel_config = type("Parallel", (), {"tensor_parallel_size": 2})()


def test_typed_stages_show_pd_attributes_only_where_the_pipeline_marked_them(fixes):
    typed = type("BaseVllmOmniStageConfig", (TypedStage,), {})
    module = type("omni_config", (), {"BaseVllmOmniStageConfig": typed})
    fixes._patch_typed_stages("qwen3_omni_pd_pipelines", module)
    fixes._patch_typed_stages("qwen3_omni_pd_pipelines", module)  # idempotent
    prefill, decode, other = typed("prefill"), typed("decode", (0,)), typed()
    assert (prefill.is_prefill_only, prefill.is_decode_only, decode.is_decode_only) == (True, False, True)
    assert decode.engine_input_source == [0]
    assert prefill.engine_args.kv_transfer_config == {"kv_role": "kv_producer"}
    assert prefill.engine_args.get("tensor_parallel_size") == 2 and prefill.engine_args.get("async_chunk") is None
    # the engine's PD code uses getattr/hasattr with defaults: an unmarked stage looks as it did before
    assert not hasattr(other, "engine_args") and getattr(other, "is_prefill_only", False) is False
    assert getattr(other, "engine_input_source", None) is None


def test_typed_stage_patch_refuses_an_engine_that_already_has_the_attribute(fixes):
    class Newer(TypedStage):
        engine_args = None

    with pytest.raises(RuntimeError, match="engine_args exists"):
        fixes._patch_typed_stages("qwen3_omni_pd_pipelines", type("m", (), {"BaseVllmOmniStageConfig": Newer}))
