# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The per-stage checks of the deployment: stage overrides, the GPU memory the stages of one GPU claim together,
and the engine's own rules (data/engine_rules.yml) over the values a stage ends up with.

``_validate.deployment`` runs them in the order their problems are reported.
"""

from __future__ import annotations

import difflib
from typing import Any

from ..host import _engine_data
from ..host._engine_data import EngineVersion
from ._checkers import SettingError, show
from ._deployment import Deployment
from ._pipelines import stage_layout
from ._problems import ALL_HOSTS, Problems
from ._stage_config import bundled_stage
from ._stages import (
    ENGINE_ARGS,
    GPU_MEMORY_BUDGET,
    MODEL_STAGE,
    OWNED_ENGINE_ARGS,
    OWNED_SAMPLING_PARAMS,
    ROLE_ALIASES,
    SAMPLING_PARAMS,
    SHARED_GPU_MEMORY,
    layout_roles,
)

# (setting, the override kind it fills, overridable keys -> checker, keys the planner owns -> the setting to use)
OVERRIDE_KINDS = (
    ("vllm_omni_stage_engine_args", "engine_args", ENGINE_ARGS, OWNED_ENGINE_ARGS),
    ("vllm_omni_stage_sampling_params", "sampling", SAMPLING_PARAMS, OWNED_SAMPLING_PARAMS),
)
# Stands for an override value that was refused (a problem says why): no checked value can be it.
_REFUSED = object()


# --- stage overrides ----------------------------------------------------------------------------


def stage_overrides(settings: dict, layout: str, problems: Problems) -> dict:
    """{role: {"engine_args": {...}, "sampling": {...}}}, validated against the layout."""
    roles = layout_roles(layout, settings["vllm_omni_audio_output"])
    result: dict[str, dict] = {role: {"engine_args": {}, "sampling": {}} for role in roles}
    tp_requests: dict[str, Any] = {}
    for setting_name, kind, allowed, owned in OVERRIDE_KINDS:
        for stage, targets, values in _stage_entries(settings, setting_name, layout, problems):
            for key, value in sorted(values.items(), key=lambda item: str(item[0])):
                if key == "tensor_parallel_size" and kind == "engine_args":
                    for target in targets:
                        tp_requests[target] = value
                    continue
                checked = _override_value(f"{setting_name}.{stage}.{key}", key, value, allowed, owned, problems)
                if checked is _REFUSED:
                    continue
                for target in targets:
                    result[target][kind][key] = checked
    if tp_requests:
        _refuse_tp_requests(settings, layout, tp_requests, problems)
    return result


def _stage_entries(settings: dict, setting_name: str, layout: str, problems: Problems):
    """(stage, the roles it sets, its values) of each entry of an override setting that names a stage of the layout."""
    roles = layout_roles(layout, settings["vllm_omni_audio_output"])
    aliases = ROLE_ALIASES.get(layout, {})
    # Aliases first so role-specific values win.
    ordered = sorted(settings[setting_name].items(), key=lambda item: (item[0] not in aliases, str(item[0])))
    for stage, values in ordered:
        if stage not in roles and stage not in aliases:
            valid = ", ".join(list(roles) + list(aliases))
            text = "" if settings["vllm_omni_audio_output"] else " text-only (vllm_omni_audio_output: false)"
            problems.add(ALL_HOSTS, f"{setting_name}.{stage}",
                         f"names no stage of the{text} {layout} layout", f"use one of: {valid}")
            continue
        if not isinstance(values, dict):
            problems.add(ALL_HOSTS, f"{setting_name}.{stage}", f"must be a mapping, got {show(values)}",
                         f"write e.g. {setting_name}: {{{stage}: {{...}}}}")
            continue
        yield stage, aliases.get(stage, (stage,)), values


def _override_value(label: str, key: Any, value: Any, allowed: dict, owned: dict, problems: Problems) -> Any:
    """The checked value of one override key, or ``_REFUSED`` after adding the problem."""
    if key in owned:
        problems.add(ALL_HOSTS, label, "is computed by the collection and cannot be overridden",
                     f"set it through {owned[key]}")
        return _REFUSED
    if key not in allowed:
        guess = difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.6)
        fix = f"did you mean {guess[0]}?" if guess else f"overridable: {', '.join(sorted(allowed))}"
        problems.add(ALL_HOSTS, label, "is not an overridable setting", fix)
        return _REFUSED
    try:
        return allowed[key](value, label)
    except SettingError as error:
        problems.setting(ALL_HOSTS, label, error)
        return _REFUSED


def _refuse_tp_requests(settings: dict, layout: str, tp_requests: dict[str, Any], problems: Problems) -> None:
    """tensor_parallel_size in a stage override: the planner derives it, and PD needs prefill and decode equal."""
    roles = layout_roles(layout, settings["vllm_omni_audio_output"])
    tp = settings["vllm_omni_tensor_parallel_size"]
    sizes = {role: tp_requests.get(role, tp) for role in ("prefill", "decode") if role in roles}
    if layout == "pd" and len(set(map(show, sizes.values()))) > 1:
        problems.add(ALL_HOSTS, "vllm_omni_stage_engine_args",
                     f"sets tensor_parallel_size per stage (prefill {show(sizes['prefill'])}, decode "
                     f"{show(sizes['decode'])}); MooncakeConnector needs prefill and decode equal, and the engine "
                     "refuses the pair otherwise",
                     "remove tensor_parallel_size from the stage overrides and set vllm_omni_tensor_parallel_size")
    else:
        problems.add(ALL_HOSTS, "vllm_omni_stage_engine_args",
                     "sets tensor_parallel_size, which the planner derives",
                     "set vllm_omni_tensor_parallel_size instead")


# --- GPU memory ---------------------------------------------------------------------------------


def shared_gpu_split(settings: dict, layout: str, overrides: dict) -> tuple[dict, list[str]]:
    """With vllm_omni_share_gpus, each role's gpu_memory_utilization share unless the user set one.

    Returns the overrides with the split added and the roles the planner chose a share for.
    """
    if not settings["vllm_omni_share_gpus"]:
        return overrides, []
    split = SHARED_GPU_MEMORY[(layout, settings["vllm_omni_audio_output"])]
    chosen = []
    for role, share in split.items():
        engine_args = overrides[role]["engine_args"]
        if "gpu_memory_utilization" not in engine_args:
            engine_args["gpu_memory_utilization"] = share
            chosen.append(role)
    return overrides, chosen


# --- the engine's own rules (data/engine_rules.yml) ------------------------------------------------

_KIND_SETTING = {"engine_args": "vllm_omni_stage_engine_args", "sampling": "vllm_omni_stage_sampling_params"}


def _base_stage(engine: EngineVersion, role: str) -> tuple[dict, dict]:
    """(engine_args, default_sampling_params) the engine's own definition gives a role's stage."""
    if engine.schema == "stage_args":
        for stage in engine.data["legacy_stages"]:
            if stage["engine_args"]["model_stage"] == MODEL_STAGE[role]:
                return dict(stage["engine_args"]), dict(stage.get("default_sampling_params") or {})
    stage = bundled_stage(engine, role)
    args = {k: v for k, v in stage.items() if k not in ("default_sampling_params", "stage_id")}
    return args, dict(stage.get("default_sampling_params") or {})


def _outside(bound: dict, value: Any) -> bool:
    if "allowed" in bound:
        return value not in bound["allowed"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    low, high = bound.get("min"), bound.get("max")
    if low is not None and (value <= low if bound.get("min_open") else value < low):
        # top_k: 0 and -1 both disable it; only values below -1 are refused.
        return True
    return high is not None and (value >= high if bound.get("max_open") else value > high)


def _engine_rule(rule: dict, **values: Any) -> str:
    text = " ".join(str(rule["rule"]).split())
    for name, value in values.items():
        text = text.replace("{" + name + "}", show(value))
    return f'"{text}" ({rule["checked_by"]})'


def _user_stage_key(settings: dict, setting_name: str, layout: str, role: str, key: str) -> str:
    """Where the user set ``key`` for ``role``: the role's own entry, or the alias that covers it (thinker)."""
    entries = settings[setting_name]
    if isinstance(entries.get(role), dict) and key in entries[role]:
        return f"{setting_name}.{role}.{key}"
    for alias, targets in ROLE_ALIASES.get(layout, {}).items():
        if role in targets and isinstance(entries.get(alias), dict) and key in entries[alias]:
            return f"{setting_name}.{alias}.{key}"
    return f"{setting_name}.{role}.{key}"


def check_engine_rules(context: Deployment, problems: Problems) -> None:
    """Every override against the rules the engine of this version checks itself: one value at a time,
    and between the arguments of one stage (with the engine's own values for what the user left alone).

    A stage default max_tokens above the stage's context is not refused: the engine accepts it and stops the
    answer at the context (data/engine_rules.yml not_refused, checked by tests/conformance/test_engine_rules.py)."""
    rules = _engine_data.engine_rules(context.engine.version)
    if not rules:
        return
    reported: set[str] = set()
    for role in layout_roles(context.layout, context.settings["vllm_omni_audio_output"]):
        base_args, base_sampling = _base_stage(context.engine, role)
        user = context.overrides.get(role, {"engine_args": {}, "sampling": {}})
        refusals = (_value_refusals(context, rules, role, user, (base_args, base_sampling))
                    + _cross_refusals(context, rules, role, {**base_args, **user["engine_args"]},
                                      set(user["engine_args"])))
        for label, problem, fix in refusals:
            if label not in reported:
                reported.add(label)
                problems.add(ALL_HOSTS, label, problem, fix)


def _value_refusals(context: Deployment, rules: dict, role: str, user: dict,
                    base: tuple[dict, dict]) -> list[tuple[str, str, str]]:
    """(label, problem, fix) for each override of the stage outside the engine's bound for that one value."""
    settings, vllm = context.settings, f"vLLM {context.engine.vllm}"
    planner_set = role in context.planner_shares
    refusals = []
    for kind, section in (("engine_args", "engine_args"), ("sampling", "sampling")):
        for key, value in sorted(user[kind].items()):
            bound = rules.get(section, {}).get(key)
            if kind == "engine_args" and key == "gpu_memory_utilization" and planner_set:
                continue
            if bound and _outside(bound, value):
                label = _user_stage_key(settings, _KIND_SETTING[kind], context.layout, role, key)
                defaults = base[0] if kind == "engine_args" else base[1]
                default = show(defaults[key]) if key in defaults else "the engine's own default"
                refusals.append((label, f"is {show(value)}, which {vllm} refuses: {_engine_rule(bound)}",
                                 f"set {label} to a value the engine accepts, or remove it (the stage's default is "
                                 f"{default})"))
    return refusals


def _cross_refusals(context: Deployment, rules: dict, role: str, args: dict,
                    user_args: set) -> list[tuple[str, str, str]]:
    """(label, problem, fix) for the engine's rules between the arguments of one stage (user's and engine's).
    The fix names the entry the user wrote (``thinker`` where that alias set the value for prefill and decode)."""
    settings, layout, vllm = context.settings, context.layout, f"vLLM {context.engine.vllm}"
    model_len = args.get("max_model_len") or rules.get("model_max_len", {}).get(settings["vllm_omni_model"])
    cross = rules.get("cross", {})
    batched, seqs = args.get("max_num_batched_tokens"), args.get("max_num_seqs")
    chunked = args.get("enable_chunked_prefill", True)
    touched = user_args & {"max_num_batched_tokens", "max_model_len", "enable_chunked_prefill"}
    refusals = []
    if ("batched_tokens_below_model_len" in cross and touched and not chunked and isinstance(batched, int)
            and isinstance(model_len, int) and batched < model_len):
        label = _user_stage_key(settings, "vllm_omni_stage_engine_args", layout, role,
                                sorted(touched)[-1] if "max_num_batched_tokens" not in touched
                                else "max_num_batched_tokens")
        refusals.append((label, f"leaves the {role} stage with max_num_batched_tokens {batched} below max_model_len "
                         f"{model_len} and chunked prefill off, which {vllm} refuses at start-up: "
                         + _engine_rule(cross["batched_tokens_below_model_len"], max_num_batched_tokens=batched,
                                        max_model_len=model_len),
                         f"in {label.rsplit('.', 1)[0]} raise max_num_batched_tokens to at least {model_len}, "
                         "set max_model_len to at most it, or set enable_chunked_prefill: true"))
    if ("batched_tokens_below_num_seqs" in cross and user_args & {"max_num_batched_tokens", "max_num_seqs"}
            and isinstance(batched, int) and isinstance(seqs, int) and batched < seqs):
        key = "max_num_batched_tokens" if "max_num_batched_tokens" in user_args else "max_num_seqs"
        label = _user_stage_key(settings, "vllm_omni_stage_engine_args", layout, role, key)
        refusals.append((label, f"leaves the {role} stage with max_num_batched_tokens {batched} below max_num_seqs "
                         f"{seqs}, which {vllm} refuses at start-up: "
                         + _engine_rule(cross["batched_tokens_below_num_seqs"], max_num_batched_tokens=batched,
                                        max_num_seqs=seqs),
                         f"in {label.rsplit('.', 1)[0]} raise max_num_batched_tokens to at least {seqs} "
                         "or lower max_num_seqs"))
    return refusals


def _base_memory(engine: EngineVersion, role: str) -> float:
    """The engine's own gpu_memory_utilization for a role (its bundled stage definitions)."""
    if engine.schema == "stage_args":
        for stage in engine.data["legacy_stages"]:
            if stage["engine_args"]["model_stage"] == MODEL_STAGE[role]:
                return float(stage["engine_args"].get("gpu_memory_utilization", 0.9))
    return float(bundled_stage(engine, role).get("gpu_memory_utilization", 0.9))


def check_gpu_memory(deployment: Deployment, problems: Problems) -> None:
    """Stages placed on one GPU claim their gpu_memory_utilization shares of it at start-up: at most the budget."""
    per_device: dict[str, list[tuple[str, float]]] = {}
    for stage in stage_layout(deployment, "host", "pipeline"):
        share = deployment.overrides[stage["role"]]["engine_args"].get(
            "gpu_memory_utilization", _base_memory(deployment.engine, stage["role"]))
        for device in stage["devices"].split(","):
            per_device.setdefault(device, []).append((stage["role"], share))
    for device, claims in sorted(per_device.items()):
        total = round(sum(share for _unused, share in claims), 4)
        if len(claims) > 1 and total > GPU_MEMORY_BUDGET:
            listed = " + ".join(f"{role} {share:g}" for role, share in claims)
            problems.add(ALL_HOSTS, "vllm_omni_stage_engine_args",
                         f"puts stages on one GPU (pipeline GPU {device}) whose gpu_memory_utilization adds up to "
                         f"{total:g} ({listed}); each stage's engine claims its share of the whole GPU at start-up, so "
                         "the last one to start would find too little free memory",
                         f"lower those stages' gpu_memory_utilization so they add up to at most {GPU_MEMORY_BUDGET:g}")
