"""Ask the INSTALLED engine what it does with overrides: runs inside an engine venv, never on the controller.

    HF_HUB_OFFLINE=1 <venv>/bin/python tests/conformance/engine_rules_probe.py MODEL_DIR < probes.json

stdin: a JSON list of probes, each ``{"id", "kind", ...}``; stdout: one line ``ENGINE-RULES-ANSWER <json>``,
``{id: {"accepted": bool, "error": str, "where": "path function", ...}}``. One process answers every probe
(the imports cost ~20 s). The kinds, each through the engine's own code path:

* ``sampling`` ``{"params": {...}}``: ``vllm.SamplingParams(**params)``, as vLLM-Omni builds a stage's
  ``default_sampling_params`` at stage start (``vllm_omni/engine/stage_init_utils.py``).
* ``engine_args`` ``{"args": {...}}``: ``OmniEngineArgs(**filter_dataclass_kwargs(...)).create_engine_config(
  usage_context=LLM_CLASS)`` for a Qwen3-Omni thinker stage on MODEL_DIR, as a stage's engine is configured
  (same file), on vLLM's CPU platform (this machine has no GPU). ``max_model_len`` is reported: the context
  length the engine derives for the stage.
* ``default_max_tokens`` ``{"max_tokens", "max_model_len"}``: what happens to a request that relies on a stage's
  default ``max_tokens`` above the stage's context: the default itself (``SamplingParams``), the request's
  tokenization limits (``ChatCompletionRequest.build_tok_params``, which only sees the request's own
  ``max_tokens``) and the scheduler's stop check at the context (``check_stop``): ``capped`` says whether the
  engine stops the answer at ``max_model_len`` (``FINISHED_LENGTH_CAPPED``).

``where`` is the engine function that raised (a pydantic field constraint: ``path Class.field``).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import traceback
from types import SimpleNamespace

MARK = "ENGINE-RULES-ANSWER "
THINKER = {"model_stage": "thinker", "hf_config_name": "thinker_config",
           "model_arch": "Qwen3OmniMoeForConditionalGeneration", "trust_remote_code": True,
           # What CUDA's omni platform names for an AR stage; the CPU platform has none (the boot's stop).
           "worker_type": "ar", "worker_cls": "vllm_omni.worker.gpu_ar_worker.GPUARWorker"}


def _site_path(filename: str) -> str:
    return filename.split("site-packages/", 1)[-1]


def _raised_in(error: BaseException) -> str:
    """The innermost vllm/vllm_omni frame of ``error``'s traceback: 'vllm/x.py Class.function'."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if "site-packages/vllm" in f.filename]
    if not frames:
        return ""
    frame = frames[-1]
    name = frame.name
    for candidate in _walk(error.__traceback__):
        if candidate.tb_frame.f_code.co_filename == frame.filename and candidate.tb_lineno == frame.lineno:
            name = getattr(candidate.tb_frame.f_code, "co_qualname", name)
    return f"{_site_path(frame.filename)} {name}"


def _walk(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def _describe(error: BaseException) -> dict:
    """Message and origin; a pydantic ValidationError is unwrapped to the engine's own ValueError or field."""
    try:
        from pydantic import ValidationError
    except ImportError:  # pragma: no cover - every engine venv has pydantic
        ValidationError = ()
    if isinstance(error, ValidationError):
        details = error.errors()
        first = details[0]
        original = (first.get("ctx") or {}).get("error")
        if isinstance(original, BaseException):
            return {"error": str(original), "where": _raised_in(original), "type": type(original).__name__}
        model = error.title
        where = ""
        for module_name in ("vllm.config", "vllm"):
            cls = getattr(sys.modules.get(module_name), model, None)
            if cls is not None:
                where = f"{_site_path(inspect.getsourcefile(cls))} {model}.{first['loc'][0]}"
                break
        return {"error": "; ".join(f"{'.'.join(map(str, d['loc']))}: {d['msg']}" for d in details),
                "where": where, "type": "ValidationError", "fields": sorted({str(d["loc"][0]) for d in details})}
    return {"error": str(error), "where": _raised_in(error), "type": type(error).__name__}


def _attempt(call) -> dict:
    try:
        extra = call() or {}
    except Exception as error:
        return {"accepted": False, **_describe(error)}
    return {"accepted": True, **extra}


def main() -> int:
    model_dir = sys.argv[1]
    probes = json.loads(sys.stdin.read())

    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    vllm.platforms._current_platform = CpuPlatform()

    from vllm import SamplingParams
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.core.sched.utils import check_stop
    from vllm.v1.request import RequestStatus
    from vllm_omni.engine.arg_utils import OmniEngineArgs
    from vllm_omni.entrypoints.utils import filter_dataclass_kwargs

    def engine_config(args: dict) -> dict:
        given = {**THINKER, "model": model_dir, **args}
        if given.get("max_model_len") is not None:  # what stage_init_utils does for a stage's own max_model_len
            os.environ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
        config = OmniEngineArgs(**filter_dataclass_kwargs(OmniEngineArgs, given)).create_engine_config(
            usage_context=UsageContext.LLM_CLASS)
        return {"max_model_len": config.model_config.max_model_len,
                "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
                "enable_chunked_prefill": config.scheduler_config.enable_chunked_prefill}

    def default_max_tokens(max_tokens: int, max_model_len: int) -> dict:
        default = SamplingParams(max_tokens=max_tokens)  # the stage's default, built at stage start
        request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}])
        request.build_tok_params(SimpleNamespace(max_model_len=max_model_len))  # the request sets no max_tokens
        prompt = 16
        running = SimpleNamespace(pooling_params=None, sampling_params=default, num_output_tokens=max_model_len - prompt,
                                  num_tokens=max_model_len, output_token_ids=[7], max_tokens=default.max_tokens,
                                  status=RequestStatus.RUNNING, stop_reason=None)
        stopped = check_stop(running, max_model_len)
        return {"capped": bool(stopped and running.status == RequestStatus.FINISHED_LENGTH_CAPPED)}

    answers = {}
    for probe in probes:
        kind = probe["kind"]
        if kind == "sampling":
            answers[probe["id"]] = _attempt(lambda p=probe: SamplingParams(**p["params"]) and None)
        elif kind == "engine_args":
            answers[probe["id"]] = _attempt(lambda p=probe: engine_config(p["args"]))
        elif kind == "default_max_tokens":
            answers[probe["id"]] = _attempt(lambda p=probe: default_max_tokens(p["max_tokens"], p["max_model_len"]))
        else:
            answers[probe["id"]] = {"accepted": False, "error": f"unknown probe kind {kind}", "where": ""}
    sys.stdout.write(MARK + json.dumps(answers) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
