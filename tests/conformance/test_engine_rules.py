"""data/engine_rules.yml against the installed engine of each supported version: every rule, both sides.

The planner refuses overrides that break these rules, quoting them as the engine's. Here each rule is put
to the engine's own validators (``engine_rules_probe.py``, in one process of the version's venv):

* a bound (``sampling``, ``engine_args``): the value just inside each end is accepted, the value just outside
  is refused, for that parameter, in the rule's words (a pydantic field constraint: refused on that field),
  by the function ``checked_by`` names; an ``allowed`` list: each listed value accepted, neighbours refused;
* a ``cross`` rule: its refusing side refused in its words by ``checked_by``, its edge and its other side
  accepted; each kind the planner knows has a probe below (a new kind fails here until it has one);
* ``not_refused``: what a remembered rule said the engine refuses and the engine accepts: it still accepts;
* ``model_max_len``: the engine derives a thinker stage's context from the thinker's max_position_embeddings.

A rule this test cannot check is in UNCHECKED, with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import OUTPUT, REPO, model_dir

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host._engine_data import (
    engine_rules,
    support_table,
    supported_versions,
)

PROBE = REPO / "tests" / "conformance" / "engine_rules_probe.py"
MARK = "ENGINE-RULES-ANSWER "
UNCHECKED = {
    # (section, name): why
    ("model_max_len", "*"): "the number is the real checkpoint's thinker text_config.max_position_embeddings; the "
                            "conformance cache holds only a config.json made from transformers' defaults (32768), so "
                            "only the derivation is checked (the engine's max_model_len == that config's value)",
}
FLOAT_STEP = 1e-6


def _just(value, step_sign: int):
    return value + step_sign * (1 if isinstance(value, int) and not isinstance(value, bool) else FLOAT_STEP)


def _bound_probes(section: str, name: str, bound: dict) -> list[dict]:
    """[{value, expect ("accept"/"refuse")}] around each end of one bound."""
    cases = []
    if "allowed" in bound:
        allowed = list(bound["allowed"])
        cases += [{"value": v, "expect": "accept"} for v in allowed]
        neighbours = {min(allowed) - 1, max(allowed) + 1} | {v + 1 for v in allowed} | {v - 1 for v in allowed}
        cases += [{"value": v, "expect": "refuse"} for v in sorted(neighbours - set(allowed)) if v > 0]
    if bound.get("min") is not None:
        low, is_open = bound["min"], bool(bound.get("min_open"))
        cases += [{"value": _just(low, +1) if is_open else low, "expect": "accept"},
                  {"value": low if is_open else _just(low, -1), "expect": "refuse"}]
    if bound.get("max") is not None:
        high, is_open = bound["max"], bool(bound.get("max_open"))
        cases += [{"value": _just(high, -1) if is_open else high, "expect": "accept"},
                  {"value": high if is_open else _just(high, +1), "expect": "refuse"}]
    return cases


def _probe(section: str, name: str, value, base: dict) -> dict:
    if section == "sampling":
        return {"kind": "sampling", "params": {name: value}}
    return {"kind": "engine_args", "args": {**base, name: value}}


def _thinker_batch(version: str) -> dict:
    """The thinker stage's own batch limits (the engine's bundled stage 0): what an override lands beside."""
    stage = support_table()[version].data["bundled_deploy"]["stages"][0]
    return {k: stage[k] for k in ("max_num_batched_tokens", "max_num_seqs") if k in stage}


# Each cross kind the planner knows: (probe, expect, values for the rule's placeholders).
def _args(**args) -> dict:
    return {"kind": "engine_args", "args": args}


CROSS = {
    "batched_tokens_below_model_len": [
        (_args(max_num_batched_tokens=4096, max_model_len=8192, enable_chunked_prefill=False), "refuse",
         {"max_num_batched_tokens": 4096, "max_model_len": 8192}),
        (_args(max_num_batched_tokens=8192, max_model_len=8192, enable_chunked_prefill=False), "accept", {}),
        (_args(max_num_batched_tokens=4096, max_model_len=8192, enable_chunked_prefill=True), "accept", {}),
    ],
    "batched_tokens_below_num_seqs": [
        (_args(max_num_batched_tokens=63, max_num_seqs=64, max_model_len=8192), "refuse",
         {"max_num_batched_tokens": 63, "max_num_seqs": 64}),
        (_args(max_num_batched_tokens=64, max_num_seqs=64, max_model_len=8192), "accept", {}),
    ],
    "max_tokens_above_model_len": [
        ({"kind": "default_max_tokens", "max_tokens": 65537, "max_model_len": 65536}, "refuse",
         {"max_tokens": 65537, "max_model_len": 65536}),
        ({"kind": "default_max_tokens", "max_tokens": 65536, "max_model_len": 65536}, "accept", {}),
    ],
}
# What the engine accepts although a rule once said it refuses it: probe, and what the answer must hold.
NOT_REFUSED = {
    "max_tokens_above_model_len": ({"kind": "default_max_tokens", "max_tokens": 100000, "max_model_len": 65536},
                                   {"accepted": True, "capped": True}),
}


def _words(text: str) -> str:
    return " ".join(str(text).split())


def _fill(rule: str, values: dict) -> str:
    text = _words(rule)
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    return text


def _plan(rules: dict, base: dict) -> tuple[list[dict], list[tuple]]:
    """(probes with ids, [(rule label, probe id, expectation)])."""
    probes, expectations = [], []

    def add(probe: dict, label: str, expect: dict) -> None:
        probe = {**probe, "id": f"p{len(probes)}"}
        probes.append(probe)
        expectations.append((label, probe["id"], expect))

    for section in ("sampling", "engine_args"):
        for name, bound in sorted(rules.get(section, {}).items()):
            for case in _bound_probes(section, name, bound):
                add(_probe(section, name, case["value"], base), f"{section}.{name}",
                    {"expect": case["expect"], "value": case["value"], "name": name, "rule": bound})
    for kind, rule in sorted(rules.get("cross", {}).items()):
        assert kind in CROSS, f"cross rule {kind} has no probe in test_engine_rules.CROSS: add one (or to UNCHECKED)"
        for probe, expect, values in CROSS[kind]:
            add(probe, f"cross.{kind}", {"expect": expect, "value": {k: v for k, v in probe.items() if k != "kind"},
                                         "name": None, "rule": rule, "values": values})
    for kind in sorted(rules.get("not_refused", {})):
        assert kind in NOT_REFUSED, f"not_refused.{kind} has no probe in test_engine_rules.NOT_REFUSED"
        probe, holds = NOT_REFUSED[kind]
        add(probe, f"not_refused.{kind}", {"expect": "holds", "holds": holds})
    if rules.get("model_max_len"):
        add({"kind": "engine_args", "args": {}}, "model_max_len (derivation)", {"expect": "derived"})
    return probes, expectations


def _disagreement(label: str, expect: dict, answer: dict, thinker_context: int) -> str | None:
    """None when the engine agrees with one expectation, else what it did instead."""
    said = f"engine: {json.dumps(answer)}"
    kind = expect["expect"]
    if kind == "holds":
        wrong = {k: answer.get(k) for k, v in expect["holds"].items() if answer.get(k) != v}
        return f"{label}: expected {expect['holds']}, {said}" if wrong else None
    if kind == "derived":
        if answer.get("max_model_len") != thinker_context:
            return f"{label}: thinker max_position_embeddings {thinker_context}, {said}"
        return None
    if kind == "accept":
        return None if answer["accepted"] else f"{label}: {expect['value']!r} should be accepted, {said}"
    if answer["accepted"]:
        return f"{label}: {expect['value']!r} should be refused, {said}"
    rule = expect["rule"]
    checked_by = _words(rule["checked_by"]).split()
    where = answer.get("where", "").split()
    if not where or where[0] != checked_by[0] or where[1] not in checked_by[1:]:
        return f"{label}: checked_by {rule['checked_by']!r}, but the engine refused in {answer.get('where')!r}"
    if answer.get("type") == "ValidationError" and expect["name"]:  # a pydantic field constraint
        if expect["name"] not in answer.get("fields", []):
            return f"{label}: refused, but not on {expect['name']}: {said}"
        return None
    words = _fill(rule["rule"], expect.get("values", {}))
    if words not in _words(answer["error"]):
        return f"WORDS {label}: the rule says {words!r}, the engine says {answer['error']!r}"
    return None


def _settle(found: list[tuple[str, str | None]], others: list[tuple[str, str | None]]) -> list[str]:
    """A bound refused in other words at one end (temperature: 'non-negative' below, '[0, 2]' above) is fine
    when the rule's words are the engine's at another end: only labels never refused in the rule's words stay."""
    worded = {label for label, problem in found if problem is None}
    return [p.removeprefix("WORDS ") for label, p in found
            if p and not (p.startswith("WORDS ") and label in worded)] + [p for _unused, p in others if p]


def test_engine_rules_are_what_the_engine_does(request, version, engines):
    """Every rule of data/engine_rules.yml for this version, both sides, in one engine process."""
    request.node.conformance_case = (version, "data/engine_rules.yml agrees with the engine")
    rules = engine_rules(version)
    assert rules, f"data/engine_rules.yml has no rules for {version}"
    venv, hf_home = engines[version]
    probes, expectations = _plan(rules, _thinker_batch(version))
    result = subprocess.run([str(venv / "bin" / "python"), str(PROBE), str(model_dir(hf_home))],
                            input=json.dumps(probes), capture_output=True, text=True, timeout=600, check=False,
                            env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HF_HOME": str(hf_home),
                                 "HOME": os.environ.get("HOME", "/root")})
    log = OUTPUT / version / "engine_rules.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(result.stdout + "\n--- stderr ---\n" + result.stderr)
    lines = [line for line in result.stdout.splitlines() if line.startswith(MARK)]
    assert lines, f"the probe did not answer (rc={result.returncode}); see {log}"
    answers = json.loads(lines[-1][len(MARK):])
    config = json.loads((model_dir(hf_home) / "config.json").read_text())
    thinker_context = config["thinker_config"]["text_config"]["max_position_embeddings"]
    problems = _settle([(label, _disagreement(label, expect, answers[probe_id], thinker_context))
                        for label, probe_id, expect in expectations if expect["expect"] == "refuse"],
                       [(label, _disagreement(label, expect, answers[probe_id], thinker_context))
                        for label, probe_id, expect in expectations if expect["expect"] != "refuse"])
    checked = sorted({label for label, _unused, _expect in expectations})
    report = {"version": version, "rules_checked": checked, "probes": len(probes), "disagreements": problems,
              "unchecked": {f"{s}.{n}": why for (s, n), why in UNCHECKED.items()}}
    (OUTPUT / version / "engine_rules.json").write_text(json.dumps(report, indent=1) + "\n")
    assert not problems, f"{len(problems)} of {len(probes)} probes disagree with data/engine_rules.yml:\n" + "\n".join(
        problems)


def test_unchecked_rules_name_real_sections():
    """UNCHECKED stays short and names sections that exist."""
    assert len(UNCHECKED) <= 3
    sections = {s for v in supported_versions() for s in engine_rules(v)}
    assert {section for section, _unused in UNCHECKED} <= sections
    assert Path(PROBE).is_file()
