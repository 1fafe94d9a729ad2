# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
"""vllm_omni.serve's engine plugin: the fixes the collection carries for vLLM-Omni, each in force only on the
exact engine versions it was proven on.

The engine role installs this directory (this module, the KV connectors in ``vllm_omni_serve_kv`` and the
distribution ``vllm-omni-serve-engine`` whose ``RECORD`` hashes every file) into the site-packages of each
engine venv whose version carries fixes (``data/support.yml``, ``engine_plugin``), then runs
``python -m vllm_omni_serve_fixes --verify``. vLLM calls ``register`` (entry-point group
``vllm.general_plugins``) in every process it starts; ``register`` arms each fix whose versions match the
installed vLLM and vLLM-Omni exactly and leaves the engine as it is everywhere else. A fix patches the
engine module it changes when that module is imported (or at once, if it already is), so processes that
never import it (engine cores, workers) never pay for it.

Fixes (docs/engine-facts.md has the evidence for each):

``request_sampling_reaches_answer_stage``
    vLLM-Omni 0.26's chat server applies a request's OpenAI sampling fields to the first comprehension stage
    only, which in a prefill/decode (PD) pipeline is prefill; decode, which writes the answer, ran on its
    stage defaults (asked ``max_tokens`` 32, got 2,048). With the fix the stage that writes the answer (decode in
    PD, the comprehension stage otherwise) gets the request's ``max_tokens`` (or ``max_completion_tokens``),
    ``temperature``, ``top_p``, ``top_k``, ``min_p``, ``stop``, ``stop_token_ids``, ``seed``, ``ignore_eos``,
    ``min_tokens``, presence, frequency and repetition penalties and ``logit_bias``, laid over that stage's
    defaults and validated as vLLM validates them (an out-of-range value is the client's HTTP 400, also on 0.30,
    whose validation error is no ValueError and would otherwise be a 500). A request
    that sets none of them keeps the stage's defaults. ``n`` above 1 is refused with HTTP 400: the pipeline
    returns one choice per request. Prefill keeps what the engine gives it (one token, no stop strings).
    ``/v1/completions`` is left alone: vLLM-Omni answers Qwen3-Omni there with HTTP 400 ("requires chat
    template structure"), seen on an H100.

``qwen3_omni_pd_pipelines``
    vLLM-Omni 0.28 and later build stages from a registered pipeline topology and a deploy config, and no
    release registers a prefill/decode (PD) topology for Qwen3-Omni (upstream PR #2947 is open); their PD
    code (``entrypoints/pd_utils.py``, the orchestrator's PD routing) is still there and still finds the pair
    with ``getattr(stage, "is_prefill_only")``, ``engine_input_source`` and ``stage.engine_args``, which the
    typed stage objects of 0.30 do not have. The fix registers two pipelines built from the engine's own
    Qwen3-Omni stages (``PD_PIPELINES``: the thinker twice, as prefill and decode, then the talker and code2wav
    for audio out), whose thinker stages carry the PD markers in their ``extras``, and gives the typed stage
    class those four read-only attributes for stages that carry the markers. Every other stage of every other
    pipeline behaves as before (the attributes are absent on them, as they were).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.abc
import importlib.metadata
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

REVISION = 3
DISTRIBUTION = "vllm-omni-serve-engine"
MODULE = "vllm_omni_serve_fixes"  # this module's import name (``__name__`` is ``__main__`` under ``-m``)

# Under the "vllm" logger, so vLLM's handler and level apply in every process that logs.
logger = logging.getLogger("vllm.vllm_omni_serve_fixes")

# Each fix: the (vllm_omni, vllm) version pairs it was proven on, and per engine module it patches the
# function that patches it. Nothing is applied under any other pair.
FIXES: dict[str, dict[str, Any]] = {
    "request_sampling_reaches_answer_stage": {
        "proven_on": (("0.26.0", "0.26.0"), ("0.30.0", "0.30.0")),
        "patches": {
            "vllm_omni.entrypoints.openai.serving_chat": "_patch_serving_chat",
        },
    },
    "qwen3_omni_pd_pipelines": {
        "proven_on": (("0.30.0", "0.30.0"),),
        "patches": {
            "vllm_omni.config.pipeline_registry": "_patch_pipeline_registry",
            "vllm_omni.config.omni_config": "_patch_typed_stages",
        },
    },
}

# The pipelines qwen3_omni_pd_pipelines registers (a deploy config names one under ``pipeline:``), and the
# engine's own Qwen3-Omni stages each is made of, in order: a PD stage's role or the engine stage it copies.
PD_PIPELINES = {
    "qwen3_omni_moe_pd": ("prefill", "decode", "talker", "code2wav"),
    "qwen3_omni_moe_pd_text": ("prefill", "decode"),
}
# Where a PD stage keeps its marker (StagePipelineConfig.extras), read by the typed stage's attributes.
PD_MARKER = "vllm_omni_serve_pd_role"

# The OpenAI request fields that reach the stage writing the answer, in vLLM's SamplingParams names.
ANSWER_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids", "seed",
                 "ignore_eos", "min_tokens", "presence_penalty", "frequency_penalty", "repetition_penalty",
                 "logit_bias")
PATCHED = "_vllm_omni_serve_fix"


def installed_versions() -> tuple[str | None, str | None]:
    """(vllm_omni, vllm) as installed in this Python, without importing either."""
    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None
    return version("vllm-omni"), version("vllm")


def fixes_in_force(versions: tuple[str | None, str | None] | None = None) -> dict[str, bool]:
    """{fix: whether it applies under ``versions`` (default: the installed ones)}."""
    versions = versions or installed_versions()
    return {name: versions in fix["proven_on"] for name, fix in FIXES.items()}


# --- applying a patch when its module is imported ------------------------------------------------------


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then the patch."""

    def __init__(self, loader, patch: Callable[[Any], None]):
        self.loader, self.patch = loader, patch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.patch(module)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds one module through the other finders and hands it back with a loader that patches it."""

    def __init__(self, name: str, patch: Callable[[Any], None]):
        self.name, self.patch = name, patch

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, self.patch)
                return spec
        return None


def _when_imported(name: str, patch: Callable[[Any], None]) -> None:
    if name in sys.modules:
        patch(sys.modules[name])
    elif not any(isinstance(finder, _PatchOnImport) and finder.name == name for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(name, patch))


def register() -> None:
    """vLLM's general-plugin entry point: arm every fix proven on the installed engine (idempotent)."""
    versions = installed_versions()
    for name, in_force in fixes_in_force(versions).items():
        if not in_force:
            logger.debug("vllm_omni_serve engine plugin revision %d: %s not applied (proven on %s, this is "
                         "vLLM-Omni %s with vLLM %s)", REVISION, name, FIXES[name]["proven_on"], *versions)
            continue
        for module, patcher in FIXES[name]["patches"].items():
            _when_imported(module, functools.partial(globals()[patcher], name))


def _mark(function: Callable, fix: str) -> Callable:
    setattr(function, PATCHED, fix)
    return function


# --- request_sampling_reaches_answer_stage ----------------------------------------------------------------


def _refuse_several_choices(n: Any) -> None:
    if n not in (None, 1):
        raise ValueError(f"n={n}: this vLLM-Omni pipeline returns one choice per request; send {n} requests "
                         "instead (refused by vllm_omni.serve's engine plugin rather than answered with fewer "
                         "choices)")


def requested_sampling(request: Any) -> dict[str, Any]:
    """The sampling fields the client set in ``request``, by SamplingParams name (protocol defaults excluded)."""
    explicit = getattr(request, "model_fields_set", None) or set()
    values = {}
    for name in ANSWER_FIELDS:
        value = getattr(request, name, None) if name in explicit else None
        if value is None or (isinstance(value, list) and not value):
            continue  # as the engine's own override does: an empty list or null keeps the default
        values[name] = value
    if "max_completion_tokens" in explicit and getattr(request, "max_completion_tokens", None) is not None:
        values["max_tokens"] = request.max_completion_tokens  # OpenAI's newer name wins, as in vLLM
    return values


def answer_stage_params(defaults: Any, values: dict[str, Any]) -> Any:
    """A SamplingParams of the stage's ``defaults`` with ``values`` laid over them, built (and so validated,
    normalised and greedy-adjusted) by vLLM's own ``SamplingParams.from_optional``."""
    import inspect

    from vllm import SamplingParams

    if isinstance(defaults, dict):
        defaults = SamplingParams(**defaults)
    accepted = inspect.signature(SamplingParams.from_optional).parameters
    merged = {name: getattr(defaults, name) for name in accepted if hasattr(defaults, name)}
    merged.update(values)
    merged = {name: value for name, value in merged.items() if name in accepted}
    if merged.get("extra_args") is not None:
        merged["extra_args"] = dict(merged["extra_args"])
    try:
        return SamplingParams.from_optional(**merged)
    except ValueError:
        raise  # the chat server's own handler answers it with HTTP 400
    except Exception as error:
        # vLLM 0.30 raises VLLMValidationError, a client error that is no ValueError; raised from here, where the
        # chat server expects ValueError for a bad request, it became HTTP 500 (temperature 3 on an H100, run 17).
        if type(error).__name__ != "VLLMValidationError":
            raise
        raise ValueError(str(error)) from error


def _pd_pair(engine_client: Any) -> tuple[int, int] | None:
    find = getattr(engine_client, "_get_pd_separation_pair", None)
    if callable(find):
        return find()
    from vllm_omni.entrypoints.pd_utils import PDDisaggregationMixin

    return PDDisaggregationMixin.detect_pd_separation_from_stage_configs(list(engine_client.stage_configs))


def _patch_serving_chat(fix: str, module: Any) -> None:
    cls = module.OmniOpenAIServingChat
    original = cls._build_sampling_params_list_from_request
    if getattr(original, PATCHED, None):
        return

    @functools.wraps(original)
    def build(self, request):
        _refuse_several_choices(getattr(request, "n", None))
        params = original(self, request)
        pair = _pd_pair(self.engine_client)
        answer = pair[1] if pair else self._get_comprehension_stage_index()
        params[answer] = answer_stage_params(self.engine_client.default_sampling_params_list[answer],
                                             requested_sampling(request))
        return params

    cls._build_sampling_params_list_from_request = _mark(build, fix)
    logger.info("vllm_omni_serve engine plugin revision %d: %s in force", REVISION, fix)


# --- qwen3_omni_pd_pipelines -------------------------------------------------------------------------------


def pd_pipeline(name: str, engine_pipeline: Any) -> Any:
    """The PD pipeline ``name`` made of ``engine_pipeline``'s (the engine's Qwen3-Omni) stages.

    Prefill is the thinker without a final output and without a next-stage processor (the orchestrator hands
    decode the original prompt and the KV transfer parameters, never a processed payload); decode is the
    thinker reading prefill, writing the text and, in the audio pipeline, feeding the talker as the thinker
    does. The talker and code2wav follow decode, one stage id later than in the engine's pipeline.
    """
    import dataclasses

    by_stage = {stage.model_stage: stage for stage in engine_pipeline.stages}
    roles = PD_PIPELINES[name]
    audio = "talker" in roles
    stages = []
    for stage_id, role in enumerate(roles):
        if role == "prefill":
            stage = dataclasses.replace(by_stage["thinker"], stage_id=stage_id, final_output=False,
                                        final_output_type=None, custom_process_next_stage_input_func=None,
                                        async_chunk_process_next_stage_input_func=None,
                                        extras={**by_stage["thinker"].extras, PD_MARKER: "prefill"})
        elif role == "decode":
            thinker = by_stage["thinker"]
            stage = dataclasses.replace(
                thinker, stage_id=stage_id, input_sources=(stage_id - 1,),
                custom_process_next_stage_input_func=thinker.custom_process_next_stage_input_func if audio else None,
                async_chunk_process_next_stage_input_func=None, extras={**thinker.extras, PD_MARKER: "decode"})
        else:
            stage = dataclasses.replace(by_stage[role], stage_id=stage_id, input_sources=(stage_id - 1,),
                                        async_chunk_process_next_stage_input_func=None)
        stages.append(stage)
    return dataclasses.replace(engine_pipeline, model_type=name, stages=tuple(stages), duplex_plugin=None,
                               default_session_mode=None, default_deploy_config_name=None)


def _patch_pipeline_registry(fix: str, module: Any) -> None:
    if all(name in module.OMNI_PIPELINES for name in PD_PIPELINES):
        return
    from vllm_omni.model_executor.models.qwen3_omni.pipeline import QWEN3_OMNI_PIPELINE

    for name in PD_PIPELINES:
        module.register_pipeline(pd_pipeline(name, QWEN3_OMNI_PIPELINE))
    logger.info("vllm_omni_serve engine plugin revision %d: %s in force (%s)", REVISION, fix, ", ".join(PD_PIPELINES))


class _PDEngineArgs:
    """What vLLM-Omni's PD code reads from a stage's ``engine_args``, taken from the typed stage."""

    def __init__(self, stage: Any):
        self.kv_transfer_config = stage.connector_config.kv_transfer_config
        self.tensor_parallel_size = stage.parallel_config.tensor_parallel_size

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name, default)


def _pd_role(stage: Any) -> str:
    """The stage's PD role; AttributeError for stages without one, so ``getattr(stage, name, default)`` and
    ``hasattr`` see them exactly as the engine made them."""
    role = stage.stage_pipeline_config.extras.get(PD_MARKER)
    if role is None:
        raise AttributeError("not a vllm_omni.serve PD stage")
    return role


def _patch_typed_stages(fix: str, module: Any) -> None:
    cls = module.BaseVllmOmniStageConfig
    if vars(cls).get(PATCHED):
        return
    attributes = {
        "is_prefill_only": lambda self: _pd_role(self) == "prefill",
        "is_decode_only": lambda self: _pd_role(self) == "decode",
        "engine_input_source": lambda self: (_pd_role(self), list(self.stage_pipeline_config.input_sources))[1],
        "engine_args": lambda self: (_pd_role(self), _PDEngineArgs(self))[1],
    }
    for name, getter in attributes.items():
        if any(name in vars(klass) for klass in cls.__mro__):
            raise RuntimeError(f"{cls.__name__}.{name} exists in this vLLM-Omni: {fix} was not written for it")
        setattr(cls, name, property(getter))
    setattr(cls, PATCHED, fix)


# --- what is installed: python -m vllm_omni_serve_fixes --verify ------------------------------------------


def _record_problems(distribution: importlib.metadata.Distribution) -> list[str]:
    problems = []
    for entry in distribution.files or []:
        if not entry.hash:
            continue  # RECORD itself
        path = entry.locate()
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as error:
            problems.append(f"{entry}: {error.strerror}")
            continue
        digest = base64.urlsafe_b64encode(hashlib.new(entry.hash.mode, data).digest()).rstrip(b"=").decode()
        if digest != entry.hash.value or (entry.size is not None and entry.size != len(data)):
            problems.append(f"{entry}: content differs from RECORD")
    return problems


def describe() -> dict[str, Any]:
    """What this engine venv carries: the plugin's revision, whether its files match RECORD, whether vLLM will
    load it, and which fixes are in force under the installed engine."""
    versions = installed_versions()
    try:
        distribution = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        missing = f"the distribution {DISTRIBUTION} is not installed beside this module"
        return {"installed": False, "revision": REVISION, "problems": [missing]}
    problems = _record_problems(distribution)
    if distribution.version != str(REVISION):
        problems.append(f"{DISTRIBUTION} {distribution.version} is installed with module revision {REVISION}")
    entry_points = [point.value for point in distribution.entry_points if point.group == "vllm.general_plugins"]
    if entry_points != [f"{MODULE}:register"]:
        problems.append(f"vllm.general_plugins entry points {entry_points}, not ['{MODULE}:register']")
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and "vllm_omni_serve" not in allowed.split(","):
        problems.append(f"VLLM_PLUGINS={allowed} leaves out vllm_omni_serve: vLLM would not load the plugin")
    return {"installed": True, "revision": REVISION, "vllm_omni": versions[0], "vllm": versions[1],
            "fixes_in_force": sorted(name for name, on in fixes_in_force(versions).items() if on),
            "problems": problems}


if __name__ == "__main__":
    if sys.argv[1:] != ["--verify"]:
        sys.exit(f"usage: python -I -m {MODULE} --verify")
    answer = describe()
    print(json.dumps(answer, sort_keys=True))
    sys.exit(1 if answer["problems"] else 0)
