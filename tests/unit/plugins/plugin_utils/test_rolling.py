"""Waves of a rolling change: the bound, round-robin over hosts, one pipeline always serving."""

from __future__ import annotations

import pytest

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._checkers import SettingError, check_max_unavailable
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.runtime import _rolling


def test_one_at_a_time_round_robin_over_hosts():
    roll = _rolling.waves({"lab-1": ["omni0", "omni1"], "lab-2": ["omni0"]}, serving=3, max_unavailable=1)
    assert roll["waves"] == [{"lab-1": ["omni0"]}, {"lab-2": ["omni0"]}, {"lab-1": ["omni1"]}]
    assert roll["bound"] == 1 and roll["pipelines"] == 3 and roll["notes"] == []


def test_a_wave_spreads_over_hosts_up_to_the_bound():
    changed = {f"h{i}": ["omni0", "omni1"] for i in range(4)}
    roll = _rolling.waves(changed, serving=8, max_unavailable=3)
    assert [sum(len(n) for n in wave.values()) for wave in roll["waves"]] == [3, 3, 2]
    assert roll["waves"][0] == {"h0": ["omni0"], "h1": ["omni0"], "h2": ["omni0"]}
    restarted = sorted((host, name) for wave in roll["waves"] for host, names in wave.items() for name in names)
    assert restarted == sorted((host, name) for host, names in changed.items() for name in names)


@pytest.mark.parametrize(("asked", "serving", "bound"), [
    ("25%", 8, 2), ("10%", 8, 1), ("100%", 8, 7), (5, 3, 2), (1, 1, 1), ("50%", 1, 1), (2, 2, 1)])
def test_the_bound_is_a_count_or_a_share_and_never_everything(asked, serving, bound):
    assert _rolling.bound(asked, serving) == bound


def test_unchanged_hosts_make_no_wave_and_the_caps_are_said():
    roll = _rolling.waves({"lab-1": [], "lab-2": ["omni0", "omni1"]}, serving=2, max_unavailable=2)
    assert roll["waves"] == [{"lab-2": ["omni0"]}, {"lab-2": ["omni1"]}]
    assert roll["notes"] == ["at most 1 of 2 serving pipelines restart at once (one keeps serving)"]
    alone = _rolling.waves({"lab-1": ["omni0"]}, serving=1, max_unavailable=1)
    assert alone["waves"] == [{"lab-1": ["omni0"]}] and "outage" in alone["notes"][0]
    assert _rolling.waves({"lab-1": []}, serving=3, max_unavailable=1) == {
        "waves": [], "bound": 1, "pipelines": 0, "notes": []}


def test_whole_hosts_roll_a_host_at_a_time():
    roll = _rolling.waves({"b": ["omni0", "omni1"], "a": ["omni0"]}, serving=3, max_unavailable=1, whole_hosts=True)
    assert roll["waves"] == [{"a": ["omni0"]}, {"b": ["omni0", "omni1"]}]


@pytest.mark.parametrize("value", [0, -1, "0%", "101%", "25", "a%", True, 1.5, None])
def test_the_setting_refuses_what_is_neither_a_count_nor_a_share(value):
    with pytest.raises(SettingError):
        check_max_unavailable(value, "vllm_omni_rolling_max_unavailable")


@pytest.mark.parametrize(("value", "normal"), [(1, 1), (4, 4), ("25%", "25%"), (" 50% ", "50%"), ("100%", "100%")])
def test_the_setting_keeps_counts_and_shares(value, normal):
    assert check_max_unavailable(value, "vllm_omni_rolling_max_unavailable") == normal
