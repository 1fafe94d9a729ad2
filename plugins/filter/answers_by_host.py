# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: answers_by_host
short_description: The answer check's answers, grouped by the host that keeps each pipeline's reference
version_added: 0.1.0
description:
  - Pairs each serving pipeline with the result of the chat completion it was sent (in the same order, as the
    engine role's C(chat_completion.yml) registers them) and groups the answers by the pipeline's C(host), the one
    its API is served from (a distributed pipeline's head).
  - An answer is the text of the first choice's message; a result without one (an error, an empty choice) is null.
options:
  _input:
    description: The plan pipelines the requests were sent to (each with C(host) and C(pipeline_key)).
    type: list
    elements: dict
    required: true
  results:
    description: The registered results of the requests, one per pipeline, in the same order.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Answers by host
  ansible.builtin.set_fact:
    answers: "{{ pipelines | vllm_omni.serve.answers_by_host(engine_chat_result.results) }}"
"""

RETURN = r"""
_value:
  description: Host -> pipeline key -> the text it answered, or null.
  type: dict
"""

from ansible.errors import AnsibleFilterError


def _text(result) -> str | None:
    choices = ((result or {}).get("json") or {}).get("choices") if isinstance(result, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    content = (choices[0].get("message") or {}).get("content")
    return content if isinstance(content, str) and content else None


def answers_by_host(pipelines, results):
    if not isinstance(pipelines, list) or not isinstance(results, list) or len(pipelines) != len(results):
        raise AnsibleFilterError("answers_by_host expects the pipelines and one request result for each, in order")
    grouped: dict[str, dict[str, str | None]] = {}
    for pipeline, result in zip(pipelines, results, strict=True):
        grouped.setdefault(str(pipeline["host"]), {})[str(pipeline["pipeline_key"])] = _text(result)
    return grouped


class FilterModule:
    def filters(self):
        return {"answers_by_host": answers_by_host}
