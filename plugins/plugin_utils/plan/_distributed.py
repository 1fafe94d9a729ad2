# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Distributed pipelines: a pd pipeline whose prefill and decode engines run as processes of their own.

vLLM-Omni 0.26's stage-based runtime (``entrypoints/cli/serve.py``): the **head** runs the API
server, the orchestrator, the OmniMasterServer and its own stage (``--stage-id 0``, the first
prefill engine); every other engine is a **headless** process (``--headless --stage-id N``) that
registers with the head's master over the network. A pipeline is distributed when it has more
than one prefill or decode engine (xPyD), or when its engines sit on several hosts.

This module decides *where* those engines go; ``_pipelines.PipelineBuilder`` turns each engine into
the plan's process entry. Placement, in order of preference:

1. A whole pipeline on one host: every engine's TP group on that host (``engines_on_host``).
2. Spare TP groups of hosts of one ``vllm_omni_span_group`` (GPUs no whole pipeline uses, hosts
   too small for one) pooled, in host order, into pipelines that span hosts (``span``): each takes
   its prefill engines first, then its decode engines, from as few hosts as the order allows.

Within a host, TP groups are carved best first (one NVLink island, else one PCIe switch / NUMA
node: ``_placement``'s penalties), so a stage's tensor-parallel ranks keep their locality; a
spanning pipeline's prefill-to-decode KV path crosses the network by construction (Mooncake TCP
or RDMA), which its explanation says.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import _placement

ROLES = ("prefill", "decode")


@dataclass(frozen=True)
class Engine:
    """One prefill or decode engine of a distributed pipeline: its host and TP group."""

    role: str
    replica: int
    host: str
    gpus: tuple[int, ...]
    locality: str  # how the group's GPUs are linked, in words

    @property
    def is_head(self) -> bool:
        return self.role == "prefill" and self.replica == 0


def tp_groups(gpus: list[int], tp: int, facts: dict | None) -> list[tuple[tuple[int, ...], str]]:
    """``gpus`` carved into as many TP groups as fit, best linked first: [(group, locality), ...]."""
    if tp == 1:
        return [((gpu,), "a single GPU") for gpu in gpus]
    if not facts or not facts.get("links"):
        count = len(gpus) // tp
        return [(tuple(gpus[i * tp:(i + 1) * tp]), "GPUs in ascending order (no topology facts)")
                for i in range(count)]
    topology = _placement.Topology(facts)
    pool = sorted(gpus, key=topology.order_key)
    groups = []
    while len(pool) >= tp:
        candidates = _placement._candidates(pool, tp, topology)
        group = min(candidates, key=lambda g: (topology.group_penalty(g), sorted(g)))
        groups.append((tuple(sorted(group)), topology.describe(group)))
        pool = [g for g in pool if g not in group]
    return groups


def _engines(slots: list[tuple[str, tuple[int, ...], str]], replicas: dict[str, int]) -> list[Engine]:
    """The first prefill + decode slots, in order, as the pipeline's engines (prefill 0 is the head)."""
    engines, position = [], 0
    for role in ROLES:
        for replica in range(replicas[role]):
            host, gpus, locality = slots[position]
            engines.append(Engine(role, replica, host, gpus, locality))
            position += 1
    return engines


def engines_on_host(host: str, gpus: list[int], count: int, tp: int, replicas: dict[str, int],
                    facts: dict | None) -> list[list[Engine]]:
    """``count`` whole distributed pipelines on one host's ``gpus``: each its engines."""
    per_pipeline = sum(replicas.values())
    slots = [(host, group, locality) for group, locality in tp_groups(gpus, tp, facts)]
    return [_engines(slots[i * per_pipeline:(i + 1) * per_pipeline], replicas) for i in range(count)]


@dataclass(frozen=True)
class Spare:
    """GPUs of one host that no whole pipeline uses, offered to pipelines spanning hosts."""

    host: str
    group: str  # vllm_omni_span_group
    gpus: list[int]
    facts: dict | None


def span(spares: list[Spare], tp: int, replicas: dict[str, int]) -> tuple[list[list[Engine]], dict[str, list[int]]]:
    """Pipelines made of spare TP groups, per span group in host order; and each host's GPUs left unused."""
    per_pipeline = sum(replicas.values())
    by_group: dict[str, list[Spare]] = {}
    for spare in spares:
        by_group.setdefault(spare.group, []).append(spare)
    pipelines, unused = [], {}
    for group in sorted(by_group):
        slots, leftovers = [], {}
        for spare in by_group[group]:
            carved = tp_groups(spare.gpus, tp, spare.facts)
            slots += [(spare.host, gpus, locality) for gpus, locality in carved]
            in_groups = {g for gpus, _unused in carved for g in gpus}
            leftovers[spare.host] = [g for g in spare.gpus if g not in in_groups]
        complete = len(slots) // per_pipeline
        for i in range(complete):
            pipelines.append(_engines(slots[i * per_pipeline:(i + 1) * per_pipeline], replicas))
        for host, gpus, _unused in slots[complete * per_pipeline:]:
            leftovers[host] = sorted(leftovers[host] + list(gpus))
        unused.update({host: gpus for host, gpus in leftovers.items() if gpus})
    return pipelines, unused


KV_TRANSPORT_NAMES = {"mooncake": "Mooncake", "nixl": "NIXL"}


def explain(engines: list[Engine], spanning: bool, kv_connector: str = "mooncake") -> list[str]:
    """Why the pipeline's engines went where they did, one line each and one for the KV path (over
    ``kv_connector``'s transport when it crosses hosts)."""
    lines = [f"{e.role} {e.replica} on {e.host}, GPUs {list(e.gpus)}: {e.locality}" for e in engines]
    hosts = sorted({e.host for e in engines})
    if spanning:
        lines.append(f"spans {', '.join(hosts)}: no host had a whole pipeline's GPUs to spare; prefill -> decode KV "
                     f"crosses the network ({KV_TRANSPORT_NAMES.get(kv_connector, kv_connector)})")
    else:
        lines.append(f"whole on {hosts[0]}: every engine on one host; prefill -> decode KV stays on the host")
    return lines
