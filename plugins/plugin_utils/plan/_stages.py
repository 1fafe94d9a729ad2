# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Stage roles per layout, and which per-stage settings users may override.

Users tune stages by role name (``decode``, ``talker``, ...), never by stage index, because the
index of a role differs between layouts. Keys the planner derives (devices, tensor-parallel
size, KV-transfer wiring, the stage topology the engine defines) are *owned*: an override of
one is refused with the setting to use instead, never dropped silently.
"""

from __future__ import annotations

from typing import Any

from ._checkers import SettingError, check_bool, check_choice, check_float, check_int, check_str, show

# Stage roles in stage-id order.
LAYOUT_ROLES = {
    "pd": ("prefill", "decode", "talker", "code2wav"),
    "aggregated": ("thinker", "talker", "code2wav"),
}
# Text-out pipelines (vllm_omni_audio_output: false): the thinker stages alone.
TEXT_ROLES = {
    "pd": ("prefill", "decode"),
    "aggregated": ("thinker",),
}
# gpu_memory_utilization per role when every stage shares the pipeline's GPU (vllm_omni_share_gpus):
# each stage's engine claims its share of the whole GPU at start-up, so the shares add up to <= 0.9,
# leaving room for the CUDA contexts of the other processes. The decode side gets more: it holds the
# KV of every running request, prefill only until the hand-off.
SHARED_GPU_MEMORY = {
    ("pd", True): {"prefill": 0.25, "decode": 0.35, "talker": 0.2, "code2wav": 0.1},
    ("pd", False): {"prefill": 0.4, "decode": 0.5},
    ("aggregated", True): {"thinker": 0.6, "talker": 0.2, "code2wav": 0.1},
    ("aggregated", False): {},
}
# What a physical GPU can be promised across the stages placed on it.
GPU_MEMORY_BUDGET = 0.95


def layout_roles(layout: str, audio: bool = True) -> tuple[str, ...]:
    """The stage roles of a pipeline, in stage-id order."""
    return LAYOUT_ROLES[layout] if audio else TEXT_ROLES[layout]


# The engine's model_stage behind each role.
MODEL_STAGE = {"prefill": "thinker", "decode": "thinker", "thinker": "thinker",
               "talker": "talker", "code2wav": "code2wav"}
# In pd, overrides under `thinker` apply to both thinker stages (role-specific ones win).
ROLE_ALIASES = {"pd": {"thinker": ("prefill", "decode")}}


def _int(low: int, high: int | None = None):
    return lambda v, n: check_int(v, n, low, high)


def _float(low: float, high: float, low_open: bool = False):
    return lambda v, n: check_float(v, n, low, high, low_open)


def _token_ids(value: Any, name: str) -> list[int]:
    if not isinstance(value, list):
        raise SettingError(f"must be a list of token ids, got {show(value)}", f"write e.g. {name}: [2150]")
    return [check_int(item, name, 0) for item in value]


def _block_size(value: Any, name: str) -> int:
    size = check_int(value, name, 1)
    if size not in (8, 16, 32, 64, 128):
        raise SettingError(f"is {size}; the KV-cache block size must be 8, 16, 32, 64 or 128",
                           "choose one of 8, 16, 32, 64, 128")
    return size


# Engine arguments a user may override per stage: name -> checker.
ENGINE_ARGS = {
    "gpu_memory_utilization": _float(0.0, 1.0, low_open=True),
    "max_num_seqs": _int(1, 65536),
    "max_num_batched_tokens": _int(1, 16777216),
    "max_model_len": _int(1, 16777216),
    "enforce_eager": check_bool,
    "enable_prefix_caching": check_bool,
    "enable_chunked_prefill": check_bool,
    "async_scheduling": check_bool,
    "dtype": lambda v, n: check_choice(v, n, ("auto", "bfloat16", "float16", "half", "float32", "float")),
    "kv_cache_dtype": lambda v, n: check_choice(v, n, ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")),
    "quantization": lambda v, n: check_str(v, n, r"[a-z0-9_-]{1,32}", "a quantization method name", "fp8"),
    "block_size": _block_size,
    "seed": _int(0, 2**32 - 1),
    # dummy: random weights, nothing downloaded (rehearsals, benchmarks of the serving path, tests).
    "load_format": lambda v, n: check_choice(v, n, ("auto", "safetensors", "pt", "dummy", "fastsafetensors")),
}

# Sampling defaults a user may override per stage.
SAMPLING_PARAMS = {
    "temperature": _float(0.0, 100.0),
    "top_p": _float(0.0, 1.0, low_open=True),
    "top_k": _int(-1, 1000000),
    "min_p": _float(0.0, 1.0),
    "max_tokens": _int(1, 16777216),
    "seed": _int(0, 2**32 - 1),
    "repetition_penalty": _float(0.0, 100.0, low_open=True),
    "presence_penalty": _float(-2.0, 2.0),
    "frequency_penalty": _float(-2.0, 2.0),
    "stop_token_ids": _token_ids,
}

# Keys the planner owns: override attempts are refused with this pointer.
OWNED_ENGINE_ARGS = {
    "tensor_parallel_size": "vllm_omni_tensor_parallel_size",
    "devices": "vllm_omni_gpus (the planner places stages on GPUs; vllm_omni_share_gpus puts them on one)",
    "kv_transfer_config": "the planner (kv_ip, engine_id, roles and ports come from the inventory)",
    "model_stage": "the engine's pipeline definition",
    "model_arch": "the engine's pipeline definition",
    "worker_type": "the engine's pipeline definition",
    "scheduler_cls": "the engine's pipeline definition",
    "engine_output_type": "the engine's pipeline definition",
    "hf_config_name": "the engine's pipeline definition",
    "custom_process_next_stage_input_func": "the engine's pipeline definition",
    "distributed_executor_backend": "the planner (multi-process per pipeline)",
    "data_parallel_size": "vllm_omni_pipelines_per_host (one pipeline = one replica)",
    "pipeline_parallel_size": "the planner (pipelines stay on one host)",
    "trust_remote_code": "the engine's pipeline definition",
}
OWNED_SAMPLING_PARAMS = {
    "detokenize": "the engine's pipeline definition (each stage's sampling constraints)",
}
