"""Scale defaults the playbooks carry themselves (docs/benchmarks.md, "Large fleets"), whatever ansible.cfg says."""

from __future__ import annotations

import yaml
from unitlib import REPO

PLAYBOOKS = REPO / "playbooks"
# Plays whose tasks read every host's result within the play (run_once over ansible_play_hosts, lockstep rounds).
LOCKSTEP = {
    ("preflight.yml", "Preflight | check every host before changing any"),
    ("artifacts.yml", "Artifacts | every host's missing wheel sets and model, from the host before it in the tree"),
    ("deploy.yml", "Roll | serving single-process pipelines that change, a bounded number at a time"),
    ("deploy.yml", "Roll | serving distributed pipelines that change, one at a time, on all their hosts together"),
}


def plays():
    for path in sorted(PLAYBOOKS.glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            if "hosts" in play:
                yield path.name, play


def test_no_play_gathers_facts_implicitly():
    gathering = [(name, play["name"]) for name, play in plays() if play.get("gather_facts") is not False]
    assert not gathering


def test_lockstep_plays_pin_the_linear_strategy():
    found = {(name, play["name"]): play.get("strategy") for name, play in plays()}
    assert set(found) >= LOCKSTEP, sorted(LOCKSTEP - set(found))
    assert {key: found[key] for key in LOCKSTEP} == dict.fromkeys(LOCKSTEP, "linear")
    assert set(found.values()) <= {None, "linear"}  # nothing asks for another strategy
