# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The deployment every host and pipeline is planned in: the validated deployment-wide settings, the engine
version and the values that follow from them (``_validate.deployment`` makes it)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..host._engine_data import EngineVersion
from ._setting_groups import EngineProcessSettings, KvTransferSettings, PortSettings, RouterSettings


@dataclass(frozen=True)
class Deployment:
    """The validated deployment settings and what the planner derived from them: what every host and pipeline shares.

    The derived values are cached properties: pipelines read them thousands of times per plan.
    """

    settings: dict
    sources: dict  # setting name -> "default" or "inventory"
    engine: EngineVersion | None  # None when the version or layout was refused (a problem says why)
    overrides: dict  # {role: {"engine_args": {...}, "sampling": {...}}}, validated
    planner_shares: list[str]  # roles whose gpu_memory_utilization the planner chose (vllm_omni_share_gpus)

    @cached_property
    def port_settings(self) -> PortSettings:
        return PortSettings.of(self.settings)

    @cached_property
    def router_settings(self) -> RouterSettings:
        return RouterSettings.of(self.settings)

    @cached_property
    def process_settings(self) -> EngineProcessSettings:
        return EngineProcessSettings.of(self.settings)

    @cached_property
    def kv_settings(self) -> KvTransferSettings:
        return KvTransferSettings.of(self.settings)

    @cached_property
    def layout(self) -> str:
        return self.settings["vllm_omni_layout"]

    @cached_property
    def tp(self) -> int:
        return self.settings["vllm_omni_tensor_parallel_size"]

    @cached_property
    def audio(self) -> bool:
        return self.settings["vllm_omni_audio_output"]

    @cached_property
    def share(self) -> bool:
        return self.settings["vllm_omni_share_gpus"]

    @cached_property
    def served(self) -> str:
        return self.settings["vllm_omni_served_model_name"] or self.settings["vllm_omni_model"]

    @cached_property
    def replicas(self) -> dict[str, int]:
        """Engines per thinker stage of a pd pipeline (xPyD); {} for aggregated."""
        if self.layout != "pd":
            return {}
        return {"prefill": self.settings["vllm_omni_prefill_replicas"], "decode": self.settings["vllm_omni_decode_replicas"]}

    @cached_property
    def distributable(self) -> bool:
        """Whether a pipeline's stages may run as processes of their own (head + headless): text-out pd only.

        vLLM-Omni 0.26 hands decode's output to the talker through host shared memory, so audio
        pipelines keep every stage in one process; shared GPUs need one process per GPU.
        """
        return self.layout == "pd" and not self.audio and not self.share

    @cached_property
    def replicated(self) -> bool:
        """More than one engine for a thinker stage: every pipeline is distributed, also on one host."""
        return any(count > 1 for count in self.replicas.values())

    @cached_property
    def spanning(self) -> bool:
        """Spare GPUs of several hosts may make a pipeline (vllm_omni_span_hosts, and a layout that can split)."""
        return self.distributable and self.settings["vllm_omni_span_hosts"]

    @cached_property
    def gpus_per_pipeline(self) -> int:
        # Shared: every stage on the one TP group. Otherwise
        # pd: each prefill and decode engine a TP group (+ one GPU shared by talker and code2wav);
        # aggregated: thinker TP (+ one GPU shared by talker and code2wav: the engine's own layout).
        if self.share:
            return self.tp
        thinkers = sum(self.replicas.values()) if self.layout == "pd" else 1
        return thinkers * self.tp + (1 if self.audio else 0)

    @cached_property
    def fewer_gpus(self) -> str:
        """The settings that really make a pipeline need fewer GPUs, for a fix (never one already at its floor)."""
        ways = []
        if self.tp > 1:
            ways.append("lower vllm_omni_tensor_parallel_size")
        if self.replicated:
            ways.append("lower vllm_omni_prefill_replicas / vllm_omni_decode_replicas")
        if self.audio and not self.share:
            ways.append("set vllm_omni_audio_output: false (text out, one GPU less)")
        # Sharing puts every stage on one TP group: it only helps where the stages need more than that.
        if not self.share and not self.replicated and self.gpus_per_pipeline > self.tp:
            ways.append("set vllm_omni_share_gpus: true (every stage on one GPU group)")
        return ", ".join(ways) if ways else "use a host with more GPUs"

    @cached_property
    def replicas_culprit(self) -> str | None:
        """The replica settings, named as the variable when they are what makes a pipeline too big."""
        if not self.replicated:
            return None
        asked = [name for name, count in (("vllm_omni_prefill_replicas", self.replicas["prefill"]),
                                          ("vllm_omni_decode_replicas", self.replicas["decode"])) if count > 1]
        return " / ".join(asked)

    @cached_property
    def gpu_formula(self) -> str:
        """``gpus_per_pipeline`` in words, for the problems that quote it."""
        if self.share:
            return f"every stage shares one TP {self.tp} GPU group"
        talker = " + 1 for talker/code2wav" if self.audio else ""
        if self.layout == "pd":
            prefill, decode = self.replicas["prefill"], self.replicas["decode"]
            engines = (f"prefill TP {self.tp} + decode TP {self.tp}" if prefill == decode == 1 else
                       f"{prefill} prefill + {decode} decode engines of TP {self.tp}")
            return engines + talker
        return f"thinker TP {self.tp}{talker}"
