"""render.yml end to end as the fleet grows: ansible-playbook's wall and CPU time, per inventory size.

    python benchmarks/render_in_ansible.py [--sizes 1000,4000] [--runs 3] [--out FILE]

make bench times the planner alone (build_plan and render_tree in one process). This times what a user waits for:
`ansible-playbook playbooks/render.yml` over an inventory of N hosts x 8 GPUs (pd, 0.26.0; the planner benchmark's
fleet, written as one YAML inventory), from Ansible's start to its exit: inventory parsing, the plan task (which
plans, checks the controller's files and writes the render in one call), the summary. Each size runs twice: into an
empty directory, then again into the same one (nothing to change), --runs times (3): the first write of tens of
thousands of files is what varies most here, with the disk's state. Wall time and the CPU time of ansible-playbook
and its workers, and each size's medians; JSON on stdout and, with --out, in FILE. Compare sizes within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".collection"))
sys.path.insert(0, str(REPO / "benchmarks"))

from plan_in_ansible import inventory_file  # the same fleet as make bench, as an Ansible inventory

WRITTEN = re.compile(r"written to \S+ \((\d+) files; added (\d+), modified (\d+), removed (\d+)\)")


def timed_render(source: Path, dest: Path) -> dict:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    result = subprocess.run(["ansible-playbook", "playbooks/render.yml", "-i", str(source),
                             "-e", f"vllm_omni_render_dir={dest}"], cwd=REPO, env=env, capture_output=True, text=True,
                            check=False)
    wall, after = time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        sys.exit(f"render_in_ansible: {source.name}: render.yml failed:\n{result.stdout[-3000:]}{result.stderr[-2000:]}")
    # The summary's last line, which Ansible's YAML output may fold over two lines.
    written = WRITTEN.search(" ".join(result.stdout.split()))
    if written is None:
        sys.exit(f"render_in_ansible: {source.name}: no 'written to' line in render.yml's output")
    files, added, modified, removed = (int(number) for number in written.groups())
    return {"wall_s": round(wall, 2), "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
            "files": files, "added": added, "modified": modified, "removed": removed}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,4000", help="inventory sizes (hosts x 8 GPUs)")
    parser.add_argument("--out", type=Path, help="also write the results here (JSON)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each size (first and again); medians compared")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as directory:
        for size in (int(text) for text in args.sizes.split(",")):
            source = inventory_file(size, Path(directory))
            runs = []
            for run in range(args.runs):
                dest = Path(directory) / f"render-{size}-{run}"
                runs.append({"first": timed_render(source, dest), "again": timed_render(source, dest)})
                shutil.rmtree(dest)  # the next run's first write goes to an empty directory again
            results.append({"hosts": size, "runs": runs,
                            "first_median_s": statistics.median(r["first"]["wall_s"] for r in runs),
                            "again_median_s": statistics.median(r["again"]["wall_s"] for r in runs)})
    smallest = results[0]
    for entry in results:
        entry["wall_ratio_to_smallest"] = round(entry["first_median_s"] / smallest["first_median_s"], 2)
    document = {"benchmark": "render.yml end to end", "when": time.strftime("%Y-%m-%d %H:%M"),
                "cores": os.cpu_count(), "results": results}
    text = json.dumps(document, indent=1) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
