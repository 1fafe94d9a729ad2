# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""``plan["answer_check"]``: the one greedy, seeded chat completion deploy's smoke test and upgrade's verify send
every serving pipeline, and the key of the reference its answer is compared with.

A pipeline can answer, and split prefill from decode, and still answer wrong: a KV hand-off that delivers the
wrong blocks (vLLM #52617) or none (SMG #1664) leaves decode writing from garbage. The check compares the answer
with the one each engine host keeps for the same key (roles/engine/tasks/verify_answers.yml,
plugins/modules/answer_reference.py). The key is what the answer may depend on: the model and its revision, the
engine (vLLM-Omni's version, or the simulator's), the tensor-parallel size and the request. Not the layout: an
aggregated pipeline's answer stays the reference when the deployment moves to PD, which is the comparison that
matters (on one H100 a PD pipeline's seeded answers equalled the aggregated pipeline's on 32 of 32 prompts,
record/gpu-evidence.md run 11). Not the GPU model either, which the plan does not know: each host keeps its own.
"""

from __future__ import annotations

import hashlib
import json

from ..host import _engine_data

# Greedy, a fixed seed, a fixed length (ignore_eos): the same pipeline gives the same answer every time.
REQUEST = {"prompt": "Name the three primary colours of light, then say which two make yellow.",
           "max_tokens": 16, "temperature": 0, "seed": 0, "ignore_eos": True}


def answer_check_plan(settings: dict, plan: dict) -> dict:
    backend = plan["backend"]
    engine = (f"xpyd-sim {_engine_data.companions()['xpyd_sim']}" if backend["stand_in"]
              else f"vLLM-Omni {plan['engine']['vllm_omni_version']}")
    identity = {"model": plan["model"], "model_revision": settings["vllm_omni_model_revision"], "engine": engine,
                "tensor_parallel_size": plan["tensor_parallel_size"], "request": REQUEST}
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return {"enabled": settings["vllm_omni_answer_check"], "request": dict(REQUEST), "key": key,
            "identity": identity, "references": plan["paths"]["answer_references"]}
