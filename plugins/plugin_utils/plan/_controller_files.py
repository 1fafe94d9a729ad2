# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The controller's own files a plan names, checked before anything is written or any host changes: the operator's
TLS material (``_tls_material``) where the front door uses provided files, and a controller model directory
(``_artifacts``). Deploy's first play checks them with the secrets (action secrets_check); render.yml's plan task
checks them in the same call that made the plan (deployment_plan ``controller_files``), so a plan of 1,000 hosts is
not handed to a second task. Needs no vault password; shows no file content.
"""

from __future__ import annotations

from . import _artifacts, _tls_material

TLS_FIX = ("put the right PEM files at vllm_omni_tls_cert_file / vllm_omni_tls_key_file (/ vllm_omni_tls_ca_file): "
           "a certificate valid now whose key is vllm_omni_tls_key_file and whose IP subjectAltNames list every "
           "router host's vllm_omni_ip; or unset both and let the collection make them")
MODEL_FIX = ("point vllm_omni_model_directory at the model's own directory (config.json, *.safetensors, tokenizer: "
             "a `hf download --local-dir` result)")
TLS_SETTINGS = {"cert_file": "vllm_omni_tls_cert_file", "key_file": "vllm_omni_tls_key_file",
                "ca_file": "vllm_omni_tls_ca_file"}


def tls_findings(plan: dict) -> tuple[list[tuple[str, str]], list[str]]:
    """(problem, fix) and warnings of the operator's TLS files, where the front door uses provided ones."""
    found: list[tuple[str, str]] = []
    tls = ((plan.get("router") or {}).get("frontdoor") or {}).get("tls") or {}
    if not (tls.get("source") == "provided" and plan["router"]["frontdoor"].get("enabled", True)):
        return found, []
    files = _tls_material.tls_file_problems({setting: tls.get(field) for field, setting in TLS_SETTINGS.items()})
    found += [(p, getattr(p, "fix", TLS_FIX)) for p in files]
    if files:
        return found, []
    addresses = {host: entry["ip"] for host, entry in plan["router"]["per_host"].items()}
    problems, tls_warnings = _tls_material.tls_material_problems(
        tls["cert_file"], tls["key_file"], tls.get("ca_file"), addresses)
    return found + [(p, getattr(p, "fix", TLS_FIX)) for p in problems], tls_warnings


def model_findings(plan: dict) -> list[tuple[str, str]]:
    """(problem, fix) of each model staged from a controller directory."""
    found: list[tuple[str, str]] = []
    for item in (plan.get("artifacts") or {}).get("items", []):
        source = item.get("source") or {}
        if item.get("kind") == "model" and source.get("kind") == "directory" and source.get("directory"):
            found += [(p, MODEL_FIX) for p in _artifacts.model_directory_problems(
                source["directory"], weights_needed=not _dummy_weights(plan))]
    return found


def message(found: list[tuple[str, str]]) -> str:
    """The problems in order, those that share a fix (one after the other) joined before it."""
    parts, fixes = [], []
    for problem, fix in found:
        if fixes and fixes[-1] == fix:
            parts[-1].append(problem)
        else:
            parts.append([problem])
            fixes.append(fix)
    return "; ".join(f"{'; '.join(ps)} -> {fix}" for ps, fix in zip(parts, fixes, strict=True))


def _dummy_weights(plan: dict) -> bool:
    """A stage override loads random weights (load_format: dummy): the directory needs no weights then."""
    overrides = ((plan.get("settings") or {}).get("vllm_omni_stage_engine_args") or {}).get("value") or {}
    return any(isinstance(args, dict) and args.get("load_format") == "dummy" for args in overrides.values())


def findings(plan: dict) -> tuple[list[tuple[str, str]], list[str]]:
    """(problem, fix) of the plan's controller files, and warnings (a certificate about to expire)."""
    found, warnings = tls_findings(plan)
    return found + model_findings(plan), warnings
