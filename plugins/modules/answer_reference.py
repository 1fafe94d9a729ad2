#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: answer_reference
short_description: Compare pipelines' answers to the answer check's request with the reference this host keeps
version_added: 0.1.0
description:
  - Deploy's smoke test and upgrade's verify send every serving pipeline one greedy, seeded chat completion (the
    plan's C(answer_check.request)). This module judges the answers of the pipelines served from this host against
    the reference the host keeps under the plan's C(answer_check.key) (the model, its revision, the engine, the
    tensor-parallel size and the request) in I(path), a JSON file only root writes.
  - With a reference, a pipeline passes when its answer is exactly the reference's.
  - Without one (the first deploy of this key on this host), the pipelines must agree with each other; their
    answer is then recorded as the reference. Pipelines that disagree fail, each with its answer, and nothing is
    recorded.
  - With I(renew), the reference is replaced by this run's answer when the pipelines agree.
  - A pipeline that gave no answer (null) fails. References under other keys stay as they are.
options:
  path:
    description: The references file (the plan's C(answer_check.references)).
    type: path
    required: true
  key:
    description: The plan's C(answer_check.key).
    type: str
    required: true
  answers:
    description: Pipeline name (C(host/pipeline)) to the text it answered, or null when it gave none.
    type: dict
    required: true
  identity:
    description: What the key stands for (the plan's C(answer_check.identity)); kept beside a new reference so a
      person can tell what it is.
    type: dict
    default: {}
  renew:
    description: Replace the reference with this run's answer when the pipelines agree on it.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Judges the same way and records nothing.
extends_documentation_fragment:
  - vllm_omni.serve.attributes
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Engine | answers against this host's reference
  vllm_omni.serve.answer_reference:
    path: /var/lib/vllm-omni-serve/answers.json
    key: 1a9aae404ad54675
    answers: {gpu-1/omni0: "Red, green and blue. Red and green make yellow.", gpu-1/omni1: "Red, green and blue."}
"""

RETURN = r"""
verdicts:
  description: Per pipeline, C(ok), C(reason), C(answer) and C(reference) (null when there was none).
  type: dict
  returned: always
recorded:
  description: Whether this run's answer became the reference (a first deploy of the key, or I(renew)).
  type: bool
  returned: always
reference:
  description: The reference the answers were judged against, with when and from which pipeline it was recorded;
    null when there was none and none could be recorded.
  type: dict
  returned: always
"""

import datetime
import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule


def judge(answers: dict, reference: dict | None, renew: bool) -> tuple[dict, str | None]:
    """(verdicts, the answer to record or None). ``reference`` is the stored entry ({answer, ...}) or None."""
    given = {name: text for name, text in answers.items() if isinstance(text, str) and text}
    agreed = next(iter(set(given.values()))) if len(set(given.values())) == 1 and len(given) == len(answers) else None
    verdicts = {}
    for name, text in answers.items():
        if not (isinstance(text, str) and text):
            verdicts[name] = {"ok": False, "answer": text, "reference": None,
                              "reason": "gave no answer to the check's request"}
        elif reference is not None and not renew:
            ok = text == reference["answer"]
            verdicts[name] = {"ok": ok, "answer": text, "reference": reference["answer"],
                              "reason": "answered as the reference" if ok else "answered differently from the reference"}
        elif agreed is not None:
            verdicts[name] = {"ok": True, "answer": text, "reference": None,
                              "reason": "renewed the reference" if reference is not None else
                              "recorded as the reference (none yet for this model, engine and request)"}
        else:
            verdicts[name] = {"ok": False, "answer": text, "reference": None,
                              "reason": "the pipelines of this host answered differently and there is no reference "
                                        "to tell which is right"}
    record = agreed if (reference is None or renew) else None
    return verdicts, record


def read_references(path: str) -> tuple[dict, str | None]:
    """(references, a warning) from ``path``; a missing file is no references, an unreadable one a warning."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError) as error:
        return {}, f"{path} could not be read ({error}); it is replaced by this run's references"
    if not isinstance(document, dict) or not isinstance(document.get("references"), dict):
        return {}, f"{path} is not an answer-references file; it is replaced by this run's references"
    return document["references"], None


def write_references(path: str, references: dict) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=".answers-", dir=directory)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump({"references": references}, handle, indent=1, sort_keys=True)
            handle.write("\n")
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "key": {"type": "str", "required": True, "no_log": False},
            "answers": {"type": "dict", "required": True},
            "identity": {"type": "dict", "default": {}},
            "renew": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    references, warning = read_references(params["path"])
    if warning:
        module.warn(warning)
    reference = references.get(params["key"])
    if reference is not None and not (isinstance(reference, dict) and isinstance(reference.get("answer"), str)):
        module.warn(f"the reference under {params['key']} in {params['path']} is malformed; it is treated as absent")
        reference = None
    verdicts, record = judge(params["answers"], reference, params["renew"])
    recorded = False
    if record is not None:
        reference = {"answer": record, "identity": params["identity"], "pipelines": sorted(params["answers"]),
                     "recorded_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
        if not module.check_mode:
            write_references(params["path"], {**references, params["key"]: reference})
        recorded = True
    module.exit_json(changed=recorded, verdicts=verdicts, recorded=recorded, reference=reference)


if __name__ == "__main__":
    main()
