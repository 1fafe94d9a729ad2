"""Model weights and wheel sets fanned out to 3 lab hosts (no route to any hub or index; needs root).

The test makes a model-shaped directory on the controller (3 GiB of shards, the real Qwen3-Omni
config when conformance left one, tokenizer files), stages it with vllm_omni_model_source:
directory and proves:
* every host holds it in HF_HOME's cache layout, every file's sha256 the controller's, refs/main
  naming the snapshot, the engines' environment offline;
* the controller sent about one copy (its rsync daemon logs every transfer's bytes) and the other
  hosts got theirs from each other, in the plan's rounds;
* a second run transfers 0 bytes;
* a corrupted shard on one host is found and replaced on the next run, from its parent.
The real engine's config check on the staged model runs in test_real_engine.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

import pytest
from test_lab import CACHE, lab, on, playbook, scenario

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (CI runs as root)")

CONTROLLER_LOG = CACHE / "artifacts" / "rsyncd.log"
CONFORMANCE_CONFIG = CACHE / "models" / "0.26.0" / "hub" / "models--Qwen--Qwen3-Omni-30B-A3B-Instruct" / "snapshots" \
    / "conformance" / "config.json"
SNAPSHOT = "/var/lib/vllm-omni/hf/hub/models--Qwen--Qwen3-Omni-30B-A3B-Instruct/snapshots/lab-2026-12-01"
SHARDS, SHARD_BYTES = 3, 1 << 30
HOSTS = ("lab-1", "lab-2", "lab-3")


def model_directory(root: Path) -> Path:
    """A model-shaped directory: shards of random bytes, config and tokenizer files."""
    model = root / "model"
    model.mkdir()
    config = CONFORMANCE_CONFIG.read_text() if CONFORMANCE_CONFIG.exists() else '{"model_type": "qwen3_omni_moe"}'
    (model / "config.json").write_text(config)
    (model / "tokenizer_config.json").write_text('{"model_max_length": 32768}')
    block = os.urandom(64 << 20)
    for shard in range(SHARDS):
        with (model / f"model-{shard + 1:05d}-of-{SHARDS:05d}.safetensors").open("wb") as out:
            for chunk in range(SHARD_BYTES // len(block)):
                out.write(chunk.to_bytes(8, "big") + block[8:])  # every 64 MiB block differs
    return model


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    lab("up", "--hosts", "3")
    root = tmp_path_factory.mktemp("staging")
    model = model_directory(root)
    groups = {"vllm_omni": {"hosts": {host: {"vllm_omni_gpus": [0, 1, 2]} for host in HOSTS}},
              "vllm_omni_router": {"hosts": {"lab-1": None}}}
    inventory = scenario(root, groups, {"vllm_omni_engine_backend": "simulator", "vllm_omni_served_model_name": "qwen3-omni",
                                        "vllm_omni_model_source": "directory", "vllm_omni_model_directory": str(model),
                                        "vllm_omni_model_revision": "lab-2026-12-01"})
    yield inventory, model
    lab("down")


def distribute(inventory: Path) -> tuple[str, float]:
    CONTROLLER_LOG.unlink(missing_ok=True)  # the controller's daemon starts it afresh, if it starts at all
    started = time.monotonic()
    result = playbook("deploy.yml", inventory, "--tags", "preflight,artifacts")
    return " ".join(result.stdout.split()), time.monotonic() - started  # the YAML callback folds long lines


def controller_sent() -> dict[str, int]:
    """Bytes the controller's daemon sent, per artifact, in the last run (its log starts empty each run)."""
    sent: dict[str, int] = {}
    text = CONTROLLER_LOG.read_text() if CONTROLLER_LOG.exists() else ""
    for module, count in re.findall(r"sent (\d+) bytes of (\S+) to", text):
        sent[count] = sent.get(count, 0) + int(module)
    return sent


def test_the_model_reaches_every_host_once_out_of_the_controller_and_checked(staged):
    inventory, model = staged
    output, seconds = distribute(inventory)
    total = sum(p.stat().st_size for p in model.iterdir())
    sent = controller_sent()
    model_id = next(key for key in sent if key.startswith("model-"))
    # One copy out of the controller (plus rsync's protocol overhead), however many hosts.
    assert total <= sent[model_id] < total * 1.01, (sent, total)
    assert "in 3 round(s)" in output and "fell back" not in output, re.findall(r"[^']*fell back[^']*", output)
    for host in HOSTS:
        assert on(host, f"cat {SNAPSHOT.rsplit('/snapshots/', 1)[0]}/refs/main") == "lab-2026-12-01"
        listing = on(host, f"cd {SNAPSHOT} && sha256sum $(ls)").splitlines()
        assert {line.split()[1]: line.split()[0] for line in listing} == {p.name: sha256(p) for p in model.iterdir()}
    # lab-2 got it from lab-1 (round 1), lab-3 from lab-1 (round 2): from peers, not the controller.
    assert re.search(r"model-\S+: [\d.]+ MB received from rsync://10\.77\.0\.11:8873/", output)
    print(f"distribution of {total / 2**30:.2f} GiB to 3 hosts: {seconds:.0f} s for the play, controller sent {sent}")


def test_a_second_run_transfers_nothing(staged):
    inventory, _unused = staged
    output, _seconds = distribute(inventory)
    # Every host holds every file as last checked: no daemon starts, no round runs, nothing is sent.
    assert controller_sent() == {} and not CONTROLLER_LOG.exists()
    assert "MB received" not in output and "Artifacts | pull and check every file" not in output


def test_a_corrupted_shard_on_one_host_is_found_and_replaced_from_its_parent(staged):
    inventory, model = staged
    shard = f"{SNAPSHOT}/model-00002-of-00003.safetensors"
    on("lab-3", f"printf 'garbage' | dd of={shard} bs=1 seek=4096 conv=notrunc status=none")
    assert on("lab-3", f"sha256sum {shard}").split()[0] != sha256(model / "model-00002-of-00003.safetensors")
    output, _seconds = distribute(inventory)
    assert "replaced 1 damaged or stray file(s): model-00002-of-00003.safetensors" in output
    assert controller_sent() == {}  # from lab-1, its parent
    assert on("lab-3", f"sha256sum {shard}").split()[0] == sha256(model / "model-00002-of-00003.safetensors")


def test_a_host_without_room_for_the_model_is_refused_before_anything_changes(staged, tmp_path):
    inventory, _unused = staged
    on("lab-2", f"rm -rf {SNAPSHOT} && mkdir -p /var/lib/vllm-omni && mount -t tmpfs -o size=1g tmpfs /var/lib/vllm-omni")
    try:
        result = playbook("deploy.yml", inventory, "--tags", "preflight,artifacts", check=False)
    finally:
        on("lab-2", "umount /var/lib/vllm-omni")
    assert result.returncode != 0
    assert re.search(r"lab-2: [\d.]+ GiB free under /var/lib/vllm-omni, model-\S+ need 3\.0 GiB more", result.stdout)
    assert "TASK [vllm_omni.serve.artifacts : Artifacts | pull" not in result.stdout
