"""Probe a vLLM-Omni pre-release the collection does not support yet (data/support.yml ``previews``), on CPU.

    python tests/conformance/preview.py VERSION        (make conformance-preview)

A preview is not deployable: the planner renders only the supported versions. This asks whether the seam the
engine plugin patches holds on the newer engine, so that supporting it is a matter of proving, not of redesign:

1. a scratch venv of the preview's vLLM-Omni and vLLM (uv, no lock: a pre-release has none; cached under
   $VLLM_OMNI_CACHE/previews/VERSION);
2. the collection's engine plugin installed into it as the engine role installs it, except that the scratch
   copy's ``proven_on`` names the preview too (the shipped plugin never arms a fix there);
3. ``engine_plugin_probe.py`` (the same probe conformance runs) over the stage configs the collection renders for
   the version the preview is ``like`` (golden renders, unchanged), then, where the engine refused them, over
   the same configs with each known difference applied (DIFFERENCES), one at a time, so the record says what
   differs and whether the rest then holds;
4. the record: docs/conformance/preview-VERSION.json (what loaded, PD pair, fixes in force, what decode received,
   the refusals), which the README's support matrix lists under the supported versions.

Standard library and the tool venv only; the probe itself runs in the scratch venv.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("VLLM_OMNI_CACHE", Path.home() / ".cache" / "vllm-omni-serve"))
PROBE = REPO / "tests" / "conformance" / "engine_plugin_probe.py"
PLUGIN = REPO / "roles" / "engine" / "files" / "engine_plugin"
MODEL_REPO = "models--Qwen--Qwen3-Omni-30B-A3B-Instruct"
# The golden renders the probe reads, per version a preview can be like (the same pair conformance probes).
CONFIGS = {"0.30.0": ("pd-030-nixl-text-4gpu", "aggregated-030")}
# Differences found on a preview, each a rewrite of the rendered config's text and the engine's refusal it answers.
DIFFERENCES = {
    "kv_transfer_config without kv_ip": {
        "refusal": "kv_transfer_config.kv_ip\n  Unexpected keyword argument",
        "rewrite": (r"(?m)^    kv_ip: .*\n", ""),
    },
}


def log(message: str) -> None:
    print(f"[preview] {message}", flush=True)


def support() -> dict:
    sys.path.insert(0, str(REPO / ".collection"))
    import yaml

    return yaml.safe_load((REPO / "data" / "support.yml").read_text())


def scratch_venv(version: str, vllm: str) -> Path:
    venv = CACHE / "previews" / version
    marker = venv / ".complete"
    if marker.is_file() and json.loads(marker.read_text()) == {"vllm_omni": version, "vllm": vllm}:
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    python = subprocess.run(["uv", "python", "find", "3.11"], capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(["uv", "venv", "-q", "--python", python, str(venv)], check=True)
    log(f"installing vllm-omni=={version} vllm=={vllm} into {venv} (uv, pre-releases allowed)")
    subprocess.run(["uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "--prerelease", "allow",
                    f"vllm-omni=={version}", f"vllm=={vllm}"], check=True,
                   env={**os.environ, "UV_CACHE_DIR": str(CACHE / "uv-cache")})
    marker.write_text(json.dumps({"vllm_omni": version, "vllm": vllm}))
    return venv


def install_plugin_armed(venv: Path, version: str, vllm: str) -> None:
    """The plugin as the engine role installs it; in this scratch copy only, every fix is armed on the preview."""
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    for earlier in purelib.glob("vllm_omni_serve_engine-*.dist-info"):
        shutil.rmtree(earlier)
    shutil.copytree(PLUGIN, purelib, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    fixes = purelib / "vllm_omni_serve_fixes.py"
    fixes.write_text(armed(fixes.read_text(), version, vllm))


def armed(text: str, version: str, vllm: str) -> str:
    """The plugin module's text with (version, vllm) added to every fix's proven_on (a scratch copy's only)."""
    text, count = re.subn(r'("proven_on": \()', rf'\1("{version}", "{vllm}"), ', text)
    fixes = len(re.findall(r'^    "[a-z0-9_]+": \{$', text, re.M))
    if count != fixes or not count:
        sys.exit(f"the plugin has {fixes} fixes but {count} proven_on tuples were armed: preview.py needs a look")
    return text


def model_home(like: str) -> Path:
    home = CACHE / "models" / like  # the conformance model config of the version the preview is like
    if not (home / "hub" / MODEL_REPO / "snapshots" / "conformance" / "config.json").is_file():
        sys.exit(f"{home}: no conformance model config; run `make conformance` first")
    return home


def probe(venv: Path, home: Path, flag: str, pd: Path, aggregated: Path, out: Path) -> dict:
    done = subprocess.run([str(venv / "bin" / "python"), str(PROBE), str(home / "hub" / MODEL_REPO / "snapshots" / "conformance"),
                           flag, str(pd), str(aggregated)], capture_output=True, text=True, timeout=900, check=False,
                          env={**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"})
    out.write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("@@engine_plugin_probe@@")]
    if done.returncode == 0 and lines:
        return {"loaded": True, "result": json.loads(lines[-1].removeprefix("@@engine_plugin_probe@@"))}
    tail = (done.stderr or done.stdout).strip().splitlines()[-12:]
    return {"loaded": False, "error": "\n".join(tail).replace(str(venv), "<preview venv>")}


def summary(result: dict) -> dict:
    """What the record keeps of a probe: the same facts conformance asserts, for a reader to compare."""
    pd, every = result["pd_chat"], result["pd_chat"]["every_field"]
    return {
        "fixes_in_force": result["describe"]["fixes_in_force"],
        "pd_pair": pd["pd_pair"],
        "stage_markers": result["stage_attributes"]["pd"],
        "decode_receives_the_clients_fields": every["with_fix"]["decode_receives"]["max_tokens"] == 7
        and every["with_fix"]["decode_receives"]["seed"] == 1234,
        "without_the_fix_decode_keeps_its_defaults": every["without_fix"]["decode_receives"]["max_tokens"],
        "refused_as_400": sorted(case for case in ("two_choices", "temperature_out_of_range", "logit_bias_not_a_token")
                                 if "refused" in pd[case]["with_fix"]),
    }


def probe_until_loaded(venv: Path, home: Path, flag: str, configs: dict, work: Path) -> tuple[list[dict], list[str]]:
    """(attempts, differences applied): the renders as they are, then with each known difference the engine's
    refusal names applied in turn, until they load or no known difference answers the refusal."""
    attempts: list[dict] = []
    applied: list[str] = []
    while True:
        attempt = probe(venv, home, flag, configs["pd"], configs["aggregated"], work / f"probe-{len(attempts)}.log")
        found = [name for name, d in DIFFERENCES.items()
                 if not attempt["loaded"] and d["refusal"] in attempt["error"] and name not in applied]
        kept = {"summary": summary(attempt["result"])} if attempt["loaded"] else {"error": attempt["error"]}
        attempts.append({"with": list(applied), "loaded": attempt["loaded"], **kept})
        if attempt["loaded"] or not found:
            return attempts, applied
        applied.append(found[0])
        pattern, replacement = DIFFERENCES[found[0]]["rewrite"]
        for name, path in list(configs.items()):
            rewritten = work / f"{name}-{len(applied)}.yaml"
            rewritten.write_text(re.sub(pattern, replacement, path.read_text()))
            configs[name] = rewritten
        log(f"the render was refused: {found[0]}; probing again with it applied")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.exit(__doc__)
    version = argv[0]
    entry = (support().get("previews") or {}).get(version)
    if entry is None:
        sys.exit(f"{version} is not a preview in data/support.yml")
    like, vllm = entry["like"], entry["vllm"]
    venv = scratch_venv(version, vllm)
    install_plugin_armed(venv, version, vllm)
    home = model_home(like)
    work = CACHE / "previews" / f"{version}-probe"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    pd_case, aggregated_case = CONFIGS[like]
    configs = {name: REPO / "tests" / "golden" / case / "expected" / "gpu-1" / "omni0" / "stage_config.yaml"
               for name, case in (("pd", pd_case), ("aggregated", aggregated_case))}
    record = {"version": version, "vllm": vllm, "like": like, "date": dt.date.today().isoformat(),
              "renders": {name: str(path.relative_to(REPO)) for name, path in configs.items()}}
    record["attempts"], applied = probe_until_loaded(venv, home, support()["versions"][like]["config_flag"], configs, work)
    last = record["attempts"][-1]
    record["differences"] = applied
    record["seam_holds"] = last["loaded"] and last["summary"]["pd_pair"] == [0, 1] and \
        last["summary"]["decode_receives_the_clients_fields"] and len(last["summary"]["refused_as_400"]) == 3
    out = REPO / "docs" / "conformance" / f"preview-{version}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    log(f"{out.relative_to(REPO)}: loaded as rendered: {record['attempts'][0]['loaded']}; differences: "
        f"{', '.join(applied) or 'none'}; the plugin's seam holds: {record['seam_holds']}")
    return 0 if last["loaded"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
