"""Hostile and bad input (tests/unit/hostile/cases.yml): one clear error, no host touched, no file written.

Each case is written as a real inventory directory and goes through three doors:

* the planner, fed by Ansible's own inventory loader: exactly one problem, naming where (host or
  "all hosts"), the variable and the fix, in that order;
* ``playbooks/render.yml``: fails with that same problem line, no Python traceback, and the render
  directory is never created;
* ``playbooks/deploy.yml``: fails on the controller with that problem line before any play reaches a
  host: the recap lists localhost only and nothing is unreachable (the hosts' addresses are made
  up, so any attempt to touch one would show).

Cases with ``door: deploy`` are about what only deploy reads on the controller (secrets, which planning never
needs and render may not read without the vault): the planner and render.yml accept them, and deploy.yml refuses
them on the controller the same way. Cases with ``door: controller`` are about the controller's files (the
operator's TLS material, a controller model directory): the planner accepts them, and render.yml and deploy.yml
both refuse them before anything is written or a host is touched. ``controller_files`` makes such files for a case (see
``make_controller_files``); ``@FILES@`` in a value is the directory they are in.

Cases with ``warns`` are legal inventories with a setting that would have no effect: the planner accepts them
with that warning in the plan, and render.yml prints it.

Every case goes through the planner door. The playbook doors cost two ansible-playbook runs a case (about
4 s, 70% of the unit suite's time when every case ran them), and for a planner-door case they exercise one path:
the plan task turns the planner's PlanError into that failed task. So the playbooks run for the cases where they
can differ (see ``through_the_playbooks``): every deploy-door and warning case, every case whose value Ansible
itself could treat differently from the planner's loader (templating, newlines, non-ASCII, shell text, secrets,
paths that climb out), and the first case of each variable the problems name.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from testlib import load_ansible_inventory
from unitlib import REPO

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._planner import build_plan
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._problems import PlanError

CASES = yaml.safe_load((Path(__file__).parent / "hostile" / "cases.yml").read_text())
BASE_HOSTS = {"gpu-a": {"ansible_host": "10.20.0.11", "vllm_omni_gpus": list(range(8))},
              "gpu-b": {"ansible_host": "10.20.0.12", "vllm_omni_gpus": list(range(8))}}
HEADER = "vllm_omni.serve: the inventory has 1 problem; nothing was changed."


def make_controller_files(spec: dict, directory: Path) -> None:
    """Files a case names on the controller: ``tls`` (a certificate and key, with one thing wrong) and ``model``
    (a model directory, with one thing wrong)."""
    directory.mkdir(parents=True, exist_ok=True)
    if "tls" in spec:
        _tls_files(spec["tls"], directory)
    if "model" in spec:
        model = directory / "model"
        model.mkdir(exist_ok=True)
        kind = spec["model"]
        if kind != "no-config":
            (model / "config.json").write_text("[1, 2]" if kind == "config-not-an-object" else
                                               "{not json" if kind == "config-not-json" else '{"model_type": "x"}')
        if kind != "no-weights":
            (model / "model.safetensors").write_bytes(b"\0" * 16)
        if kind == "link-out":
            (model / "tokenizer.json").symlink_to("/etc/passwd")


def _tls_files(kind: str, directory: Path) -> None:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    day = datetime.timedelta(days=1)
    key, other = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    if kind == "rsa-1024":
        from cryptography.hazmat.primitives.asymmetric import rsa
        key = rsa.generate_private_key(public_exponent=65537, key_size=1024)  # noqa: S505 - the weak key refused
    ca_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "router")])
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hostile CA")])
    import ipaddress
    sans = {"no-router-ip": ["10.20.0.99"], "dns-only": []}.get(kind, ["10.20.0.11"])
    names = [x509.IPAddress(ipaddress.ip_address(a)) for a in sans] + [x509.DNSName("router.example")]
    start, end = {"expired": (now - 400 * day, now - day), "not-yet-valid": (now + 10 * day, now + 400 * day),
                  "expiring-soon": (now - 300 * day, now + 5 * day)}.get(kind, (now - day, now + 400 * day))
    issuer_key = ca_key if kind in ("ok", "wrong-ca", "ca-first") else key
    cert = (x509.CertificateBuilder().subject_name(name)
            .issuer_name(ca_name if issuer_key is ca_key else name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(names), critical=False).sign(issuer_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (directory / "cert.pem").write_bytes(cert.public_bytes(pem))
    used = other if kind == "key-mismatch" else key
    encryption = (serialization.BestAvailableEncryption(b"passphrase") if kind == "encrypted-key"
                  else serialization.NoEncryption())
    (directory / "key.pem").write_bytes(used.private_bytes(pem, serialization.PrivateFormat.PKCS8, encryption))
    ca_signer = ec.generate_private_key(ec.SECP256R1()) if kind == "wrong-ca" else ca_key
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_signer.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - day).not_valid_after(now + 900 * day)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_signer, hashes.SHA256()))
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    if kind == "ca-first":  # the chain in the wrong order: the CA, then the server's own certificate
        (directory / "cert.pem").write_bytes(ca.public_bytes(pem) + cert.public_bytes(pem))
    if kind == "key-in-cert":  # one file with both, as some tools write it
        (directory / "cert.pem").write_bytes(cert.public_bytes(pem) + (directory / "key.pem").read_bytes())


def _with_files(value, files: str):
    if isinstance(value, str):
        return value.replace("@FILES@", files)
    if isinstance(value, dict):
        return {k: _with_files(v, files) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_files(v, files) for v in value]
    return value


def write_inventory(case: dict, directory: Path) -> Path:
    files = directory.parent / f"{directory.name}-files"
    if case.get("controller_files"):
        make_controller_files(case["controller_files"], files)
    case = _with_files(case, str(files))
    hosts = copy.deepcopy(case.get("hosts", BASE_HOSTS))
    for host, host_vars in (case.get("host_vars") or {}).items():
        hosts.setdefault(host, {}).update(host_vars)
    children = {"vllm_omni": {"hosts": hosts, "vars": case.get("vars", {})}}
    for group, members in (case.get("groups") or {}).items():
        children[group] = {"hosts": members}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": children}}, allow_unicode=True))
    return path


def in_order(text: str, fragments: list[str]) -> None:
    position = 0
    for fragment in fragments:
        found = text.find(fragment, position)
        assert found >= 0, f"{fragment!r} not found (in order) in: {text}"
        position = found + len(fragment)


def problem_line(case: dict) -> str | None:
    """The one problem line for ``case``; asserts there is exactly one and it reads where -> what -> fix.

    None for a deploy- or controller-door case, after checking the planner accepts it."""
    path = write_inventory(case, Path(os.environ["HOSTILE_TMP"]) / case["id"])
    if case.get("door") in ("deploy", "controller") or "warns" in case:
        inventory = load_ansible_inventory(path)
    if case.get("door") in ("deploy", "controller"):
        build_plan(inventory)
        return None
    if "warns" in case:
        warnings = " | ".join(build_plan(inventory)["warnings"])
        in_order(warnings, case["warns"])
        return None
    with pytest.raises(PlanError) as caught:  # reading the inventory may refuse it already (a secret in a setting)
        build_plan(load_ansible_inventory(path))
    message = str(caught.value)
    assert message.startswith(HEADER), message
    lines = message.splitlines()[1:]
    assert len(lines) == 1, message
    line = lines[0]
    in_order(line, case["error"])
    assert " -> " in line, f"no fix given: {line}"
    return line.strip().removeprefix("- ")


def run_playbook(playbook: str, inventory: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           # Any SSH attempt would fail fast and show as UNREACHABLE.
           "ANSIBLE_TIMEOUT": "2"}
    return subprocess.run(["ansible-playbook", f"playbooks/{playbook}", "-i", str(inventory), *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)


# Fragments of a case's text (JSON, ASCII-escaped) that Ansible may read differently from the planner's inventory
# loader, or that must not leak into a playbook's output: Jinja, newlines, non-ASCII, shell text, secrets, "..".
ANSIBLE_SENSITIVE = ("{{", "{%", "\\n", "\\u", "shell", "$(", ";", "`", "key", "token", "secret", "..")


def through_the_playbooks(cases: list[dict]) -> list[dict]:
    """The cases that also go through render.yml and deploy.yml (the module docstring says why not all)."""
    chosen, variables = [], set()
    for case in cases:
        text = json.dumps(case, ensure_ascii=True)
        first_of_its_variable = "error" in case and case["error"][1] not in variables
        if case.get("door") in ("deploy", "controller") or "warns" in case or first_of_its_variable or \
                any(fragment in text for fragment in ANSIBLE_SENSITIVE):
            chosen.append(case)
        if "error" in case:
            variables.add(case["error"][1])
    return chosen


PLAYBOOK_CASES = through_the_playbooks(CASES)


def playbook_runs(case: dict, root: Path) -> dict:
    """One case through render.yml and deploy.yml. Each case is its own test, so pytest-xdist
    (ansible-test units) spreads the cases over its workers and runs each exactly once."""
    inventory = write_inventory(case, root / case["id"] / "inventory")
    render_dir = root / case["id"] / "render"
    render = run_playbook("render.yml", inventory, "-e", f"vllm_omni_render_dir={render_dir}")
    deploy = run_playbook("deploy.yml", inventory)
    return {"render": render, "deploy": deploy, "render_dir": render_dir}


@pytest.fixture(autouse=True)
def _tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTILE_TMP", str(tmp_path))


def test_the_table_is_big_and_every_case_is_distinct():
    ids = [case["id"] for case in CASES]
    assert len(ids) >= 40
    assert len(set(ids)) == len(ids)
    inputs = [yaml.safe_dump({k: v for k, v in case.items() if k not in ("id", "error", "warns")}) for case in CASES]
    assert len(set(inputs)) == len(inputs), "two cases feed the same inventory"


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_planner_gives_one_clear_error(case):
    line = problem_line(case)  # one line, in the case's words; None where deploy's first play is the door
    assert line is None or " -> " in line, line


def test_the_playbook_doors_see_every_kind_of_case():
    chosen = {case["id"] for case in PLAYBOOK_CASES}
    assert {case["id"] for case in CASES if case.get("door") in ("deploy", "controller") or "warns" in case} <= chosen
    assert {case["error"][1] for case in PLAYBOOK_CASES if "error" in case} == \
        {case["error"][1] for case in CASES if "error" in case}
    assert {"hf-home-newline-injects-a-unit-line", "served-model-name-unicode", "api-key-through-an-intermediate-variable",
            "version-shell-metacharacters", "pipeline-prefix-path-traversal"} <= chosen
    assert "gpus-negative" not in chosen  # a planner-door case whose variable an earlier case already took through
    assert len(chosen) < len(CASES)


@pytest.mark.parametrize("case", PLAYBOOK_CASES, ids=[case["id"] for case in PLAYBOOK_CASES])
def test_render_and_deploy_stop_on_the_controller_with_that_error(case, tmp_path):
    line = problem_line(case)
    if "warns" in case:
        inventory = write_inventory(case, tmp_path / case["id"] / "inventory")
        render = run_playbook("render.yml", inventory, "-e", f"vllm_omni_render_dir={tmp_path / 'render'}")
        assert render.returncode == 0, render.stdout[-3000:]
        in_order(" ".join(render.stdout.split()), [" ".join(case["warns"][0].split())])
        return
    runs = playbook_runs(case, tmp_path)
    refusing = ("deploy",) if case.get("door") == "deploy" else ("render", "deploy")
    if case.get("door") == "deploy":
        render = runs["render"]
        assert render.returncode == 0, "render.yml needs no secret: " + render.stdout[-3000:]
    for name in refusing:
        result = runs[name]
        output = result.stdout + result.stderr
        assert result.returncode != 0, f"{name}.yml accepted {case['id']}"
        if line is None:
            # Ansible's YAML output folds long messages: compare with whitespace collapsed.
            in_order(" ".join(output.split("fatal: [")[-1].split()), case["error"])
        else:
            assert line in output, f"{name}.yml did not print the problem line {line!r}:\n{output[-3000:]}"
        # One failed task (Ansible 2.19 shows it twice: as an [ERROR] line and as the task's result).
        assert output.count("fatal: [") == 1 and "failed=1" in output.split("PLAY RECAP")[-1], output[-3000:]
        assert "Traceback" not in output, output[-3000:]
        # It failed on the controller: render's play is localhost's; deploy's plan play runs once for the
        # inventory hosts it targets, delegated to localhost (so it plans under --limit too), contacting none.
        assert re.search(r"fatal: \[(localhost|[^\]]+ -> localhost)\]", output), output[-3000:]
        recap = output.split("PLAY RECAP")[-1]
        rows = [row for row in recap.splitlines() if "ok=" in row]
        assert rows and all("changed=0" in row for row in rows), recap
        if name == "render":
            assert [row.split()[0] for row in rows] == ["localhost"], recap
        assert "UNREACHABLE" not in output and "unreachable=0" in recap, recap
    if case.get("door") != "deploy":
        assert not runs["render_dir"].exists(), "render.yml wrote a directory for a refused inventory"
