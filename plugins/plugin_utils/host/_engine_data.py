# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The support table (``data/support.yml``), per-version engine data (``data/engines/``) and the engine's
own rules for the overrides the collection passes through (``data/engine_rules.yml``).

Both ship inside the collection, so the planner works the same from a checkout and from an
installed collection. The files are read once per process.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

try:
    _Loader = yaml.CSafeLoader
except AttributeError:  # PyYAML without libyaml
    _Loader = yaml.SafeLoader

DATA_DIR = Path(__file__).resolve().parents[3] / "data"
# The engine plugin's fix that hands a request's sampling fields to the stage writing the answer.
ANSWER_STAGE_SAMPLING_FIX = "request_sampling_reaches_answer_stage"


@dataclass(frozen=True)
class EngineVersion:
    """One row of the support table plus what the engine itself told us about that version."""

    version: str
    vllm: str
    wheel_cuda_major: int
    schema: str  # "stage_args" (legacy) or "stages" (deploy schema)
    config_flag: str
    layouts: tuple[str, ...]
    pd_refused_because: str
    data: dict[str, Any]
    # The KV connectors this version's PD stages can load, by transport (vllm_omni_kv_connector:
    # mooncake, nixl): the collection's class for each ({module, class, revision}). Empty where the
    # version runs no PD.
    kv_connectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Whether the engine itself applies a request's sampling fields (max_tokens, temperature, ...) to the PD
    # decode stage.
    pd_request_sampling_reaches_decode: bool = True
    # The collection's engine plugin where this version carries it (roles/engine/files/engine_plugin: the KV
    # connectors and the fixes in force on this version): {revision, fixes}; None where nothing of ours runs
    # inside the engine.
    engine_plugin: dict[str, Any] | None = None
    # stages-schema versions: the registered pipeline a PD deploy config names, per output ({audio, text}); the
    # engine plugin registers them. Empty where the version runs no PD or writes it out in stage_args.
    pd_pipelines: dict[str, str] = field(default_factory=dict)

    def pd_pipeline(self, audio: bool) -> str | None:
        """The registered pipeline a PD deploy config of this version names; None for stage_args versions."""
        return self.pd_pipelines.get("audio" if audio else "text")

    @property
    def decode_gets_request_sampling(self) -> bool:
        """Whether a PD request's sampling fields reach decode: by the engine, or by the plugin's fix."""
        return self.pd_request_sampling_reaches_decode or (
            ANSWER_STAGE_SAMPLING_FIX in (self.engine_plugin or {}).get("fixes", ()))

    def kv_connector(self, transport: str) -> dict[str, Any] | None:
        """The collection's connector class for ``transport`` on this version, or None where it has none."""
        spec = self.kv_connectors.get(transport)
        return dict(spec) if spec else None

    @property
    def importables(self) -> frozenset[str]:
        return frozenset(self.data["importables"])

    @property
    def serve_flags(self) -> frozenset[str]:
        return frozenset(self.data["serve_flags"])


def _load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as handle:
        return yaml.load(handle, Loader=_Loader)  # noqa: S506 - CSafeLoader/SafeLoader only


def _engine_plugin(version: str, row: dict) -> dict[str, Any] | None:
    plugin = row.get("engine_plugin")
    if row.get("kv_connectors") and not plugin:
        raise ValueError(f"data/support.yml {version}: kv_connectors live in the engine plugin; give the version "
                         "an engine_plugin")
    return {"revision": int(plugin["revision"]), "fixes": list(plugin.get("fixes") or [])} if plugin else None


def _pd_pipelines(version: str, row: dict) -> dict[str, str]:
    pipelines = {str(kind): str(name) for kind, name in (row.get("pd_pipelines") or {}).items()}
    if "pd" in row["layouts"] and row["schema"] == "stages" and set(pipelines) != {"audio", "text"}:
        raise ValueError(f"data/support.yml {version}: a stages-schema version runs PD through registered pipelines; "
                         "give it pd_pipelines: {audio: ..., text: ...}")
    return pipelines


@functools.cache
def support_table() -> dict[str, EngineVersion]:
    table = _load_yaml(DATA_DIR / "support.yml")["versions"]
    rows = {}
    for version, row in table.items():
        rows[version] = EngineVersion(
            version=version,
            vllm=row["vllm"],
            wheel_cuda_major=int(row["wheel_cuda_major"]),
            schema=row["schema"],
            config_flag=row["config_flag"],
            layouts=tuple(row["layouts"]),
            pd_refused_because=" ".join(str(row.get("pd_refused_because", "")).split()),
            data=_load_yaml(DATA_DIR / "engines" / f"{version}.yaml"),
            kv_connectors={name: dict(spec) for name, spec in (row.get("kv_connectors") or {}).items()},
            pd_request_sampling_reaches_decode=bool(row.get("pd_request_sampling_reaches_decode", True)),
            engine_plugin=_engine_plugin(version, row),
            pd_pipelines=_pd_pipelines(version, row),
        )
    return rows


@functools.cache
def engine_rules(version: str) -> dict[str, Any]:
    """The engine's rules for overrides of ``version`` ({sampling, engine_args, cross, model_max_len}); {} if none.

    A version may ``inherit`` another's rules (the same validators in vLLM) and add or replace its own."""
    table = _load_yaml(DATA_DIR / "engine_rules.yml")["versions"]
    seen: list[str] = []
    rules: dict[str, Any] = {}
    while version in table and version not in seen:
        seen.append(version)
        version = table[version].get("inherit", "")
    for name in reversed(seen):
        for section, values in table[name].items():
            if section != "inherit":
                rules[section] = {**rules.get(section, {}), **values}
    return rules


def supported_versions() -> list[str]:
    return sorted(support_table(), key=lambda v: tuple(int(p) for p in v.split(".")))


def versions_with_layout(layout: str) -> list[str]:
    return [v for v in supported_versions() if layout in support_table()[v].layouts]


def versions_with_schema(schema: str) -> list[str]:
    return [v for v in supported_versions() if support_table()[v].schema == schema]


@functools.cache
def companions() -> dict[str, Any]:
    """Pinned companion packages (simulator, router, Mooncake and NIXL variants)."""
    return _load_yaml(DATA_DIR / "support.yml")["companions"]


@functools.cache
def model_parameters(model: str) -> dict[str, int] | None:
    """Parameters of each model stage (thinker, talker, code2wav) of ``model`` (data/models.yml), or None for a model
    not listed there."""
    entry = _load_yaml(DATA_DIR / "models.yml")["models"].get(model)
    return None if entry is None else dict(entry["parameters"])


@functools.cache
def model_weights(model: str) -> dict[str, int] | None:
    """Bytes of each model stage's weights of ``model`` as published (data/models.yml), or None for a model not
    listed there."""
    parameters = model_parameters(model)
    if parameters is None:
        return None
    size = _load_yaml(DATA_DIR / "models.yml")["models"][model]["bytes_per_parameter"]
    return {stage: count * size for stage, count in parameters.items()}
