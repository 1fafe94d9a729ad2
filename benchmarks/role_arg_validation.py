"""What Ansible's role argument validation costs when a role declares the whole plan, and when it gets its part.

    python benchmarks/role_arg_validation.py [--hosts 64,256,1024] [--out FILE]

Every role of the collection declares `vllm_omni_plan` in its meta/argument_specs.yml, and Ansible validates the
declared arguments at each role start on each host: it takes them from the task vars, deep-copies and walks them.
For each fleet size (the planner benchmark's hosts x 8 GPUs, pd, 0.26.0) this plans once, then times
`ansible-playbook` on localhost twice: a play that sets the plan as the host's own variable (deploy's plan task
registers it for every host) and one that starts a role once with `vllm_omni_plan: "{{ plan_result }}"` (as
playbooks/vars/plan.yml reads it), the role declaring the plan or not. The difference is one role start's validation.
Then the same role start as the collection's roles make it (playbooks/vars/plan.yml): the engine role's declared sections (its
meta/argument_specs.yml), its part of the plan for the first engine host (filter role_plan). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / ".collection"))

import plan_render  # the planner benchmark's fleet
import yaml

from ansible_collections.vllm_omni.serve.plugins.filter import role_plan

ENGINE_SPEC = yaml.safe_load((REPO / "roles" / "engine" / "meta" / "argument_specs.yml").read_text())
SPEC = {"with_plan": {"vllm_omni_plan": {"type": "dict", "required": True, "description": "The plan."}},
        "without_plan": {},
        "engine_part": {"vllm_omni_plan": ENGINE_SPEC["argument_specs"]["main"]["options"]["vllm_omni_plan"]}}


def write_roles(root: Path) -> None:
    # Ansible's defaults, the two roles on the roles path, no warning about an implicit localhost.
    # The collection from this checkout (.collection, made by make), for the filter role_plan.
    (root / "ansible.cfg").write_text("[defaults]\nroles_path = roles\nlocalhost_warning = false\n"
                                      f"collections_path = {REPO / '.collection'}\n")
    for name, options in SPEC.items():
        (root / "roles" / name / "meta").mkdir(parents=True)
        (root / "roles" / name / "tasks").mkdir(parents=True)
        (root / "roles" / name / "meta" / "argument_specs.yml").write_text(json.dumps(
            {"argument_specs": {"main": {"short_description": name, "options": options}}}))
        (root / "roles" / name / "tasks" / "main.yml").write_text(
            json.dumps([{"ansible.builtin.debug": {"msg": "{{ vllm_omni_plan.schema }}"}}]))


def playbook(root: Path, role: str, plan_file: Path, engine_host: str) -> Path:
    path = root / f"{role}-{plan_file.stem}.yml"
    given = (f"{{{{ plan_result | vllm_omni.serve.role_plan('vllm_omni.serve.engine', '{engine_host}') }}}}"
             if role == "engine_part" else "{{ plan_result }}")
    path.write_text(json.dumps([
        {"hosts": "localhost", "gather_facts": False, "tasks": [
            {"ansible.builtin.set_fact": {
                "plan_result": f"{{{{ lookup('ansible.builtin.file', '{plan_file}') | from_json }}}}"}}]},
        {"hosts": "localhost", "gather_facts": False, "vars": {"vllm_omni_plan": given},
         "tasks": [{"ansible.builtin.include_role": {"name": role}}]},
    ]))
    return path


def timed(path: Path, root: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(["ansible-playbook", str(path)], cwd=root, capture_output=True, text=True, check=False,
                          env={**os.environ, "ANSIBLE_CONFIG": str(root / "ansible.cfg")})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{path.name} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return {"wall_s": round(wall, 2), "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="64,256,1024")
    parser.add_argument("--out")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        write_roles(root)
        for hosts in (int(h) for h in args.hosts.split(",")):
            plan_file = root / f"plan-{hosts}.json"
            plan = plan_render.build_plan(plan_render.inventory(hosts, "pd", "0.26.0"))
            plan_file.write_text(json.dumps(plan))
            engine_host = sorted(plan["hosts"])[0]
            part = role_plan.role_plan(plan, "vllm_omni.serve.engine", engine_host)
            row = {"hosts": hosts, "plan_bytes": plan_file.stat().st_size, "engine_part_bytes": len(json.dumps(part))}
            for role in SPEC:
                row[role] = timed(playbook(root, role, plan_file, engine_host), root)
            row["validation_cpu_s"] = round(row["with_plan"]["cpu_s"] - row["without_plan"]["cpu_s"], 2)
            row["part_validation_cpu_s"] = round(row["engine_part"]["cpu_s"] - row["without_plan"]["cpu_s"], 2)
            results.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    document = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "results": results}
    text = json.dumps(document, indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
