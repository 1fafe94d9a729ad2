"""Every render the collection ships, proven against the real vLLM-Omni engine on a CPU machine.

For each golden render and each shipped example inventory, in the venv of the render's version:

1. the engine loads the stage config the way the argv's flag does, resolves the planned stages
   (ids, model stages, devices, TP, inputs) and, for PD, detects the pair (0, 1) with the planned
   bootstrap address (``config_check``'s checker, the same code the on-host module runs);
2. every dotted path in the config imports;
3. ``vllm serve`` runs with exactly the unit's argv and environment (inside a network and mount
   namespace that owns the host's address and the planned paths) and gets past
   ``Launching Orchestrator thread with N stages`` to the CPU platform's worker lookup, with no
   config error on the way.

Plus the bad inputs that must stay red in the engine and be refused by our validator first, and a
check that data/engines/<version>.yaml still matches what the engine says.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import OUTPUT, REPO, model_dir, run_checker
from testlib import load_ansible_inventory

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host._engine_data import support_table
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._stage_config_checks import check_document, check_launch
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime._expect import expected_pd, expected_stages
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts._render import render_tree

INVENTORIES = {f"golden/{p.name}": p / "inventory" for p in sorted((REPO / "tests" / "golden").iterdir())
               if (p / "inventory").is_dir()}
INVENTORIES.update({f"inventories/{p.name}": p for p in sorted((REPO / "inventories").iterdir())
                    if p.is_dir() and p.name != "lab"})
RECIPE = REPO / "tests" / "fixtures" / "recipe_as_documented.yaml"
CONFIG_ERRORS = re.compile(r"Failed to load transfer config|Undefined connector reference|Dropping unknown|"
                           r"Missing key|ConfigAttributeError|ValidationError|uses the removed `?stage_args")


def _plan(name: str) -> dict:
    return build_plan(load_ansible_inventory(INVENTORIES[name]))


@pytest.fixture(scope="session")
def renders():
    """{case: (plan, directory with the render)} for every golden and example inventory."""
    result = {}
    for name in INVENTORIES:
        plan = _plan(name)
        directory = OUTPUT / "renders" / name
        shutil.rmtree(directory, ignore_errors=True)
        for path, text in render_tree(plan).items():
            (directory / path).parent.mkdir(parents=True, exist_ok=True)
            (directory / path).write_text(text)
        result[name] = (plan, directory)
    return result


def _pipelines(plan):
    return [p for host in plan["hosts"].values() for p in host["pipelines"]]


def _expectations(plan: dict, pipeline: dict) -> tuple[list[dict], dict]:
    """The same expectations the engine role hands config_check on a host."""
    return expected_stages(pipeline), expected_pd(pipeline, plan)


@pytest.fixture(scope="session")
def checked(engines, renders):
    """{(case, host, pipeline): answer}: one engine process per version checks every pipeline."""
    answers = {}
    for version, (venv, hf_home) in engines.items():
        keys, requests = [], []
        for name, (plan, directory) in renders.items():
            if plan["engine"]["vllm_omni_version"] != version:
                continue
            for pipeline in _pipelines(plan):
                stages, pd = _expectations(plan, pipeline)
                keys.append((name, pipeline["host"], pipeline["name"]))
                requests.append({
                    "config": str(directory / pipeline["host"] / pipeline["name"] / "stage_config.yaml"),
                    "config_flag": plan["engine"]["config_flag"], "model_dir": str(model_dir(hf_home)),
                    "environment": pipeline["environment"], "expected_stages": stages, "expected_pd": pd,
                })
        if requests:
            answers.update(zip(keys, run_checker(venv, requests, OUTPUT / version / "checker.log"), strict=True))
    return answers


def _mark(request, version: str, case: str) -> None:
    request.node.conformance_case = (version, case)


@pytest.mark.parametrize("case", list(INVENTORIES))
def test_engine_loads_every_pipeline_as_planned(request, case, checked, renders):
    plan, _unused = renders[case]
    _mark(request, plan["engine"]["vllm_omni_version"], f"{case}: load + imports")
    for pipeline in _pipelines(plan):
        answer = checked[(case, pipeline["host"], pipeline["name"])]
        assert answer["problems"] == [], f"{pipeline['host']}/{pipeline['name']}: {answer['problems']}"
        assert len(answer["stages"]) == len(pipeline["stages"])
        assert [s["devices"] for s in answer["stages"]] == [s["devices"] for s in pipeline["stages"]]
        if plan["layout"] == "pd":
            assert answer["pd_pair"] == [0, 1]
            # vLLM's own factory finds the connector the plan names, for both PD stages.
            assert answer["kv_connectors"] == dict.fromkeys(("0", "1"), expected_pd(pipeline, plan)["kv_connector"])
            # Mooncake: the prefill engine the config names: its own, or (a distributed pipeline's decode) the
            # head's. NIXL has no bootstrap server (the engine finds none in a NIXL config).
            bootstrap = expected_pd(pipeline, plan)["bootstrap"]
            assert answer["pd_bootstrap_addr"] == bootstrap
            if bootstrap is None:
                assert "nixl_side_channel" in pipeline["ports"]
            elif pipeline["process"] != "headless":  # only the orchestrator hands decode an address
                assert answer["runtime_bootstrap_addr"] == f"http://{bootstrap}"
        else:
            assert answer["pd_pair"] is None
        assert answer["imported"], "no dotted path was imported: the checker looked at nothing"


BOOT_SCRIPT = r"""
set -euo pipefail
ip link set lo up
ip addr add "$BOOT_IP/32" dev lo
for pair in $BOOT_MOUNTS; do
  mount --bind "${pair%%=*}" "${pair#*=}"
done
exec env -i PATH=/usr/bin:/bin $BOOT_ENV timeout "$BOOT_TIMEOUT" "$@"
"""


def boot(venv: Path, hf_home: Path, plan: dict, pipeline: dict, rendered: Path, log: Path, timeout: int = 240) -> str:
    """Run the pipeline's exact argv and environment until the engine stops; return the log."""
    if os.geteuid() != 0:
        pytest.skip("booting in a network/mount namespace needs root (CI runs as root)")
    paths = pipeline["paths"]
    mounts = {str(venv): paths["venv"], str(rendered): paths["config_dir"],
              str(hf_home): pipeline["environment"]["HF_HOME"]}
    created = []
    for target in mounts.values():  # mount points; removed again below when we made them
        missing = []
        probe = Path(target)
        while not probe.exists():
            missing.append(probe)
            probe = probe.parent
        Path(target).mkdir(parents=True, exist_ok=True)
        created += missing
    env = dict(pipeline["environment"], HF_HUB_OFFLINE="1")  # no network in CI: the only addition
    try:
        result = subprocess.run(
            ["unshare", "--mount", "--net", "--fork", "--propagation", "private", "bash", "-c", BOOT_SCRIPT, "boot",
             *pipeline["argv"]],
            env={"PATH": os.environ["PATH"], "BOOT_IP": pipeline["kv_ip"], "BOOT_TIMEOUT": str(timeout),
                 "BOOT_MOUNTS": " ".join(f"{s}={t}" for s, t in mounts.items()),
                 "BOOT_ENV": " ".join(f"{k}={v}" for k, v in env.items())},
            capture_output=True, text=True, timeout=timeout + 60, check=False)
    finally:
        for path in sorted(created, key=lambda p: len(p.parts), reverse=True):
            path.rmdir()
    text = f"$ {' '.join(pipeline['argv'])}\n# env: {json.dumps(env)}\n# rc={result.returncode}\n" + result.stdout + result.stderr
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(text)
    assert result.returncode != 124, f"the engine did not stop within {timeout}s; see {log}"
    return text


def _booted(plan: dict) -> list[dict]:
    """The processes each case boots: the last one (shifted GPUs, ports and Mooncake slice); in a case with
    distributed pipelines the head and a headless stage of the last one too."""
    processes = _pipelines(plan)
    chosen = [processes[-1]]
    distributed = [p for p in processes if p["process"] != "single"]
    if distributed:
        key = distributed[-1]["pipeline_key"]
        chosen += [next(p for p in distributed if p["pipeline_key"] == key and p["process"] == kind)
                   for kind in ("head", "headless")]
    return list({(p["host"], p["name"]): p for p in chosen}.values())


@pytest.mark.parametrize("case", list(INVENTORIES))
def test_engine_boots_the_exact_unit_argv_to_the_cpu_worker_lookup(request, case, engines, renders):
    """Each booted process gets as far as the CPU platform lets it: the worker class lookup.

    A distributed pipeline's head gets there in the stage-based runtime ("Single-stage mode", its master's
    address) after the orchestrator has its stages; a headless stage after resolving its own stage's
    devices. Both stop there, before the head's OmniMasterServer starts and before the headless stage
    registers with it (tests/lab proves that handshake with the engine's own code across lab hosts).
    """
    plan, directory = renders[case]
    version = plan["engine"]["vllm_omni_version"]
    _mark(request, version, f"{case}: boot")
    venv, hf_home = engines[version]
    for pipeline in _booted(plan):
        log = OUTPUT / version / "boot" / f"{case.replace('/', '_')}-{pipeline['host']}-{pipeline['name']}.log"
        text = boot(venv, hf_home, plan, pipeline, directory / pipeline["host"] / pipeline["name"], log)
        assert "get_omni_ar_worker_cls" in text and "NotImplementedError" in text, f"stopped elsewhere; see {log}"
        assert not CONFIG_ERRORS.search(text), f"config error in the log: {CONFIG_ERRORS.search(text).group(0)}; see {log}"
        if pipeline["process"] == "headless":
            stage = pipeline["stage_id"]
            assert f"[Headless] Stage {stage}: 1 local replicas" in text, f"see {log}"
        else:
            assert f"Launching Orchestrator thread with {len(pipeline['stages'])} stages" in text, f"see {log}"
        if pipeline["process"] == "head":
            master = f"{pipeline['master']['address']}:{pipeline['master']['port']}"
            assert f"Single-stage mode enabled (stage_id_filter=0, master={master})" in text, f"see {log}"
        if plan["layout"] == "pd":
            # One edge per stage after the first, wired by the engine itself once input_connectors are dropped.
            edges = len(pipeline["stages"]) - 1
            assert f"Loaded OmniTransferConfig with {edges} connector configurations" in text, f"see {log}"


def _serve_plain(venv: Path, hf_home: Path, flag: str, config: Path, log: Path) -> str:
    """The documented launch line, on loopback; returns the log."""
    argv = [str(venv / "bin" / "vllm"), "serve", "Qwen/Qwen3-Omni-30B-A3B-Instruct", "--omni", "--host", "127.0.0.1",
            "--port", "18791", flag, str(config)]
    env = {"PATH": "/usr/bin:/bin", "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    text = f"$ {' '.join(argv)}\n# rc={result.returncode}\n" + result.stdout + result.stderr
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(text)
    return text


NEGATIVE = {
    # (version, flag): (what the engine does, what our validator says)
    ("0.26.0", "--stage-configs-path"): ("Missing key final_output_type", "missing key final_output_type"),
    ("0.26.0", "--deploy-config"): ("Launching Orchestrator thread with 3 stages", "silently runs the model's 3-stage"),
    ("0.30.0", "--deploy-config"): ("uses the removed `stage_args` schema", "rejects the stage_args schema"),
}


@pytest.mark.parametrize(("negative_version", "flag"), list(NEGATIVE))
def test_documented_recipe_stays_red_in_the_engine_and_is_refused_first(request, negative_version, flag, engines):
    if negative_version not in engines:
        pytest.skip(f"{negative_version} is not in the support table")
    _mark(request, negative_version, f"recipe_as_documented with {flag}: engine red, validator refuses")
    engine_says, we_say = NEGATIVE[(negative_version, flag)]
    document = yaml.safe_load(RECIPE.read_text())
    row = support_table()[negative_version]
    ours = check_launch(document, row, flag) + (check_document(document, row) if flag == row.config_flag else [])
    assert any(we_say in p for p in ours), ours
    venv, hf_home = engines[negative_version]
    text = _serve_plain(venv, hf_home, flag, RECIPE, OUTPUT / negative_version / "negative" / f"recipe{flag}.log")
    assert engine_says in text, f"the engine no longer does what we guard against ({engine_says!r}); re-check the trap"
    if engine_says.startswith("Launching"):
        assert "is_prefill_only" not in text and "PD disaggregation detected" not in text


def test_engine_data_matches_what_the_engine_says(request, version, engines):
    _mark(request, version, "data/engines matches the engine")
    venv, hf_home = engines[version]
    result = subprocess.run([str(venv / "bin" / "python"), str(REPO / "tests" / "conformance" / "derive_engine_data.py"),
                             str(model_dir(hf_home))], capture_output=True, text=True, timeout=600, check=False,
                            env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": os.environ.get("HOME", "/root")})
    assert result.returncode == 0, result.stderr[-3000:]
    committed = (REPO / "data" / "engines" / f"{version}.yaml").read_text()
    assert yaml.safe_load(result.stdout) == yaml.safe_load(committed), (
        f"data/engines/{version}.yaml is stale: regenerate with `make engine-data` and review the diff")


def test_config_check_module_runs_through_ansible(request, engines, renders, tmp_path):
    """The on-host module (AnsiballZ, the venv's own Python) on a golden PD render and on the recipe."""
    version = "0.26.0"
    _mark(request, version, "config_check module via ansible")
    venv, hf_home = engines[version]
    plan, directory = renders["golden/pd-2hosts"]
    pipeline = _pipelines(plan)[1]
    stages, pd = _expectations(plan, pipeline)
    playbook = tmp_path / "check.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False, "tasks": [
            {"name": "check a good render", "register": "good", "vllm_omni.serve.config_check": {
                "venv": str(venv), "config": str(directory / pipeline["host"] / pipeline["name"] / "stage_config.yaml"),
                "config_flag": "--stage-configs-path", "model_dir": str(model_dir(hf_home)),
                "environment": pipeline["environment"], "expected_stages": stages, "expected_pd": pd}},
            {"name": "check the recipe", "register": "bad", "ignore_errors": True, "vllm_omni.serve.config_check": {
                "venv": str(venv), "config": str(RECIPE), "config_flag": "--stage-configs-path",
                "model_dir": str(model_dir(hf_home))}},
            {"name": "report", "ansible.builtin.copy": {"dest": str(tmp_path / "result.json"),
                                                        "content": "{{ {'good': good, 'bad': bad} | to_json }}"}},
        ]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    run = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e",
                          f"ansible_python_interpreter={sys.executable}", str(playbook)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stdout[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["good"]["problems"] == [] and result["good"]["pd_pair"] == [0, 1]
    assert result["good"]["pd_bootstrap_addr"] == "192.168.10.22:9100"
    assert result["bad"]["failed"] is True
    assert any("Missing key final_output_type" in p for p in result["bad"]["problems"])
    assert any("talker2code2wav_token_only cannot be imported" in p for p in result["bad"]["problems"])
