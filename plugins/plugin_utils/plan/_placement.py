# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""Topology-aware placement of pipelines on a host's GPUs.

Without topology facts, pipelines take the GPUs in ascending order (pipeline i gets slice i).
With ``nvidia-smi topo -m`` facts, each pipeline is chosen greedily, best first, by a penalty:

* a tensor-parallel group should stay inside one NVLink island (or one PCIe switch / NUMA node);
* a pipeline's prefill and decode GPUs should be NVLink-connected (rank i of prefill to rank i
  of decode; Mooncake moves KV between exactly those);
* the talker/code2wav GPU should sit on the decode stage's NUMA node (it reads decode's output
  through host shared memory), and a pipeline should not span NUMA nodes at all.

Every pipeline gets a 0-100 score (100 = nothing to improve) and one line per choice, which the
plan carries so ``plan.json`` says why each GPU went where.
"""

from __future__ import annotations

import copy
import itertools
import json
import math

# Penalty per link kind between two GPUs (nvidia-smi topo -m legend), and the words for it.
LINK_PENALTY = {"PIX": 10, "PXB": 10, "PHB": 20, "NODE": 20, "SYS": 40}
LINK_WORDS = {"PIX": "one PCIe bridge", "PXB": "PCIe bridges", "PHB": "a PCIe host bridge",
              "NODE": "host bridges in one NUMA node", "SYS": "across NUMA nodes"}
UNKNOWN_PENALTY = 40
TALKER_OFF_NODE_PENALTY = 5
SPAN_PENALTY = 3  # a pipeline across NUMA nodes: its processes cannot all be near their GPUs
MAX_COMBINATIONS = 120  # beyond this, candidate TP groups are consecutive runs in topology order


class Topology:
    def __init__(self, facts: dict):
        self.links = {int(a): {int(b): kind for b, kind in row.items()} for a, row in facts.get("links", {}).items()}
        self.numa = {gpu["index"]: gpu.get("numa_node") for gpu in facts.get("gpus", [])}
        self.island = {}
        for number, island in enumerate(facts.get("nvlink_islands", [])):
            for gpu in island:
                self.island[gpu] = number

    def kind(self, a: int, b: int) -> str:
        return self.links.get(a, {}).get(b, "?")

    def penalty(self, a: int, b: int) -> int:
        kind = self.kind(a, b)
        if kind.startswith("NV"):
            return 0
        return LINK_PENALTY.get(kind, UNKNOWN_PENALTY)

    def group_penalty(self, group: tuple[int, ...]) -> int:
        return max((self.penalty(a, b) for a, b in itertools.combinations(group, 2)), default=0)

    def order_key(self, gpu: int) -> tuple:
        numa = self.numa.get(gpu)
        return (self.island.get(gpu, gpu), -1 if numa is None else numa, gpu)

    def describe(self, group: tuple[int, ...]) -> str:
        if len(group) == 1:
            return "a single GPU"
        kinds = {self.kind(a, b) for a, b in itertools.combinations(group, 2)}
        if all(k.startswith("NV") for k in kinds):
            return f"inside one NVLink island ({', '.join(sorted(kinds))})"
        worst = max(kinds, key=lambda k: LINK_PENALTY.get(k, UNKNOWN_PENALTY) if not k.startswith("NV") else 0)
        return f"linked through {LINK_WORDS.get(worst, worst)} ({worst})"


def _candidates(pool: list[int], size: int, topology: Topology) -> list[tuple[int, ...]]:
    if size == 1:
        return [(gpu,) for gpu in pool]
    if math.comb(len(pool), size) <= MAX_COMBINATIONS:
        return list(itertools.combinations(pool, size))
    ordered = sorted(pool, key=topology.order_key)
    return [tuple(sorted(ordered[i:i + size])) for i in range(len(ordered) - size + 1)]


def _thinker_cost(topology: Topology, groups: list[tuple[int, ...]]) -> int:
    cost = 2 * sum(topology.group_penalty(group) for group in groups)
    if len(groups) == 2:  # prefill -> decode, rank by rank
        cost += max(topology.penalty(p, d) for p, d in zip(groups[0], groups[1], strict=True))
    return cost


def _talker(pool: list[int], used: set[int], reader: int, topology: Topology) -> tuple[int, int]:
    """(talker GPU, its penalty): the first free GPU in topology order on the reader's NUMA node."""
    free = [g for g in pool if g not in used]
    home = topology.numa.get(reader)
    for gpu in free:
        if home is None or topology.numa.get(gpu) == home:
            return gpu, 0
    return free[0], TALKER_OFF_NODE_PENALTY


def _best_pipeline(pool: list[int], tp: int, pd: bool, audio: bool, topology: Topology):
    """Best (key, thinker groups, talker GPU or None); ``pd`` False also for a shared-GPU pipeline."""
    best = None
    for first in _candidates(pool, tp, topology):
        rest = [g for g in pool if g not in first]
        for second in (_candidates(rest, tp, topology) if pd else [()]):
            groups = [first, second] if pd else [first]
            used = set(first) | set(second)
            talker, talker_penalty = _talker(pool, used, groups[-1][0], topology) if audio else (None, 0)
            everything = used | ({talker} if talker is not None else set())
            nodes = {topology.numa.get(g) for g in everything}
            cost = _thinker_cost(topology, groups) + talker_penalty + (SPAN_PENALTY if len(nodes) > 1 else 0)
            key = (cost, sorted(everything), first)
            if best is None or key < best[0]:
                best = (key, groups, talker)
    return best


_CACHE: dict[str, list[dict]] = {}


def place(gpus: list[int], count: int, tp: int, layout: str, facts: dict | None, audio: bool = True,
          share: bool = False) -> list[dict]:
    """``count`` pipelines on ``gpus``: each {"gpus": [thinker group(s)..., talker], "score", "explain"}.

    ``audio`` False: no talker GPU. ``share``: one TP group per pipeline holds every stage.
    Identical hosts (same GPUs, same topology) are placed once per process.
    """
    if not facts or not facts.get("links"):
        return _place(gpus, count, tp, layout, facts, audio, share)
    key = json.dumps([gpus, count, tp, layout, audio, share, facts.get("links"), facts.get("nvlink_islands"),
                      [(g["index"], g.get("numa_node")) for g in facts.get("gpus", [])]], sort_keys=True)
    if key not in _CACHE:
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[key] = _place(gpus, count, tp, layout, facts, audio, share)
    return copy.deepcopy(_CACHE[key])


def _place(gpus: list[int], count: int, tp: int, layout: str, facts: dict | None, audio: bool = True,
           share: bool = False) -> list[dict]:
    pd = layout == "pd"
    separate_pd = pd and not share  # prefill and decode on GPU groups of their own
    talker_gpu = audio and not share
    per_pipeline = (2 * tp if separate_pd else tp) + (1 if talker_gpu else 0)
    shared_note = ["every stage shares the pipeline's GPUs (vllm_omni_share_gpus)"] if share else []
    if not facts or not facts.get("links"):
        reason = "no topology facts" if not facts else "nvidia-smi topo -m was not read"
        return [{"gpus": gpus[i * per_pipeline:(i + 1) * per_pipeline], "score": None,
                 "explain": [f"{reason}: GPUs taken in ascending order", *shared_note]} for i in range(count)]
    topology = Topology(facts)
    pool = sorted(gpus, key=topology.order_key)
    placed = []
    for _round in range(count):
        (cost, _used, _first), groups, talker = _best_pipeline(pool, tp, separate_pd, talker_gpu, topology)
        roles = ["prefill", "decode"] if separate_pd else ["prefill + decode"] if pd else ["thinker"]
        explain = [f"{role} GPUs {list(group)}: {topology.describe(group)}" for role, group in zip(roles, groups,
                                                                                                   strict=True)]
        if separate_pd:
            kinds = sorted({topology.kind(p, d) for p, d in zip(groups[0], groups[1], strict=True)})
            explain.append(f"prefill -> decode KV path: {', '.join(kinds)}")
        elif pd:
            explain.append("prefill -> decode KV path: the same GPU (Mooncake over loopback TCP)")
        if talker is not None:
            reader_numa, talker_numa = topology.numa.get(groups[-1][0]), topology.numa.get(talker)
            explain.append(f"talker + code2wav GPU {talker}: NUMA node {talker_numa}"
                           + (" (same as decode)" if pd and talker_numa == reader_numa else
                              " (same as the thinker)" if talker_numa == reader_numa else
                              f" (reader on node {reader_numa})"))
        explain += shared_note
        chosen = [g for group in groups for g in group] + ([talker] if talker is not None else [])
        placed.append({"gpus": chosen, "score": max(0, 100 - cost), "explain": explain})
        pool = [g for g in pool if g not in set(chosen)]
    return placed
