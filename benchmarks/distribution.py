"""Artifact distribution benchmark on the local lab: controller egress and wall time for 1, 2 and 3 hosts.

    python benchmarks/distribution.py [--model-gib 3] [--hosts 1,2,3]      (root; starts the lab)

For each host count, the hosts' copies are removed and the artifacts play runs (`deploy.yml --tags
artifacts`: the controller's part, the free-disk check, the rounds) for the real engine's wheel set
(vLLM-Omni 0.26.0 PD, from the controller's wheelhouse) and a model-shaped directory made here.
Measured: the bytes the controller's rsync daemon sent per artifact (its transfer log), the bytes every
host received and from where (the play's per-pull lines), the play's wall time. Then a re-run of the
largest count, which must send nothing. Prints a JSON report and a Markdown table (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "lab"))
CACHE = Path(os.environ.get("VLLM_OMNI_CACHE", Path.home() / ".cache" / "vllm-omni-serve"))
LAB = [sys.executable, str(REPO / "tests" / "lab" / "lab.py")]
HOSTS = ["lab-1", "lab-2", "lab-3"]
SNAPSHOTS = "/var/lib/vllm-omni/hf/hub/models--Qwen--Qwen3-Omni-30B-A3B-Instruct"


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)


def model_directory(root: Path, gib: int) -> Path:
    model = root / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3_omni_moe"}')
    block = os.urandom(64 << 20)
    for shard in range(gib):
        with (model / f"model-{shard + 1:05d}-of-{gib:05d}.safetensors").open("wb") as out:
            for chunk in range(16):
                out.write(chunk.to_bytes(8, "big") + shard.to_bytes(8, "big") + block[16:])
    return model


def inventory(root: Path, hosts: list[str], model: Path) -> Path:
    import yaml

    directory = root / f"inventory-{len(hosts)}"
    (directory / "group_vars").mkdir(parents=True, exist_ok=True)
    engine_hosts = {h: {"vllm_omni_gpus": [0, 1, 2]} for h in hosts}
    (directory / "hosts.yml").write_text(yaml.safe_dump({"vllm_omni": {"hosts": engine_hosts}}))
    (directory / "group_vars" / "all.yml").write_text(yaml.safe_dump({
        "vllm_omni_engine_backend": "engine", "vllm_omni_version": "0.26.0", "vllm_omni_firewall_enabled": False,
        "vllm_omni_api_key": "benchmark-key-0123456789abcdef", "vllm_omni_model_source": "directory",
        "vllm_omni_model_directory": str(model), "vllm_omni_model_revision": "benchmark"}))
    return directory


def distribute(directory: Path) -> tuple[float, str]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    (CACHE / "artifacts" / "rsyncd.log").unlink(missing_ok=True)  # started afresh when the daemon starts
    started = time.monotonic()
    result = run(["ansible-playbook", "playbooks/deploy.yml", "-i", str(REPO / "inventories" / "lab" / "hosts.yml"),
                  "-i", str(directory), "--tags", "artifacts"], cwd=REPO, env=env)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(result.stdout[-4000:] + result.stderr[-2000:])
    return seconds, " ".join(result.stdout.split())


def controller_sent() -> dict[str, int]:
    sent: dict[str, int] = {}
    log = CACHE / "artifacts" / "rsyncd.log"
    for count, module in re.findall(r"sent (\d+) bytes of (\S+) to", log.read_text() if log.exists() else ""):
        sent[module] = sent.get(module, 0) + int(count)
    return sent


def host_pulls(output: str) -> list[dict]:
    pattern = r"(\S+): ([\d.]+) MB received from rsync://([\d.]+):\d+/\S+ in ([\d.]+) s"
    return [{"artifact": a, "mb": float(mb), "from": src, "seconds": float(s)} for a, mb, src, s in re.findall(pattern, output)]


def clear_hosts() -> None:
    for host in HOSTS:
        run([*LAB, "exec", host, "--", "sh", "-c",
             f"rm -rf /var/cache/vllm-omni/wheelhouse {SNAPSHOTS} /var/lib/vllm-omni-serve/artifacts"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-gib", type=int, default=3)
    parser.add_argument("--hosts", default="1,2,3")
    args = parser.parse_args()
    counts = [int(n) for n in args.hosts.split(",")]
    run([*LAB, "up", "--hosts", str(max(counts))])
    root = Path(tempfile.mkdtemp(prefix="distribution-"))
    try:
        model = model_directory(root, args.model_gib)
        report = []
        for count in counts:
            clear_hosts()
            seconds, output = distribute(inventory(root, HOSTS[:count], model))
            report.append({"hosts": count, "seconds": round(seconds, 1), "controller_sent": controller_sent(),
                           "pulls": host_pulls(output)})
        seconds, output = distribute(inventory(root, HOSTS[:max(counts)], model))
        report.append({"hosts": max(counts), "rerun": True, "seconds": round(seconds, 1),
                       "controller_sent": controller_sent(), "pulls": host_pulls(output)})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(report, indent=1))
    print("| hosts | controller sent (GB) | hosts received (GB) | from peers (GB) | play wall time (s) |")
    print("| --- | --- | --- | --- | --- |")
    for row in report:
        received = sum(p["mb"] for p in row["pulls"]) / 1e3
        peers = sum(p["mb"] for p in row["pulls"] if not p["from"].endswith(".1")) / 1e3
        label = f"{row['hosts']}{' (re-run)' if row.get('rerun') else ''}"
        print(f"| {label} | {sum(row['controller_sent'].values()) / 1e9:.2f} | {received:.2f} | {peers:.2f} | "
              f"{row['seconds']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
