"""The settings' value checkers on their own: the normalized value back, or a SettingError whose problem says
what is wrong and whose fix says what to write (for YAML and for -e on the command line)."""

from __future__ import annotations

import pytest

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._checkers import (
    SettingError,
    check_bool,
    check_choice,
    check_float,
    check_gpu_list,
    check_int,
    check_ipv4,
    check_port_range,
    check_str,
    show,
    type_name,
)


def refusal(check, *args) -> SettingError:
    with pytest.raises(SettingError) as caught:
        check(*args)
    return caught.value


def test_integers_in_bounds_pass_and_a_quoted_number_gets_the_json_hint():
    assert check_int(8, "n", 1, 8) == 8
    error = refusal(check_int, "8", "vllm_omni_x", 1, 8)
    assert error.problem == 'is a string ("8"), not a number'
    assert error.fix.endswith("""-e '{"vllm_omni_x": 8}'""")
    assert refusal(check_int, True, "n", 1).problem == "must be an integer, got boolean true"
    assert refusal(check_int, 9, "n", 1, 8).problem == "is 9, must be between 1 and 8"
    assert refusal(check_int, 0, "n", 1).fix == "choose a value at least 1"


def test_floats_respect_an_open_lower_bound_and_refuse_nan_and_overflow():
    assert check_float(1, "f", 0.0, 1.0, low_open=True) == 1.0
    assert refusal(check_float, 0.0, "f", 0.0, 1.0, True).problem == "is 0.0, must be in (0.0, 1.0]"
    assert "must be in [0.0, 1.0]" in refusal(check_float, float("nan"), "f", 0.0, 1.0).problem
    assert "far outside" in refusal(check_float, 10**400, "f", 0.0, 1.0).problem
    assert refusal(check_float, "0.5", "f", 0.0, 1.0).problem == 'is a string ("0.5"), not a number'


def test_a_boolean_written_as_a_string_is_named_as_such():
    assert check_bool(False, "b") is False
    assert refusal(check_bool, "yes", "vllm_omni_b").problem == 'is the string "yes", not a boolean'
    assert refusal(check_bool, 1, "b").problem == "must be true or false, got integer 1"


def test_choices_list_what_is_allowed():
    assert check_choice("pd", "layout", ("pd", "aggregated")) == "pd"
    error = refusal(check_choice, "PD", "vllm_omni_layout", ("pd", "aggregated"))
    assert error.problem == 'is "PD", must be one of pd, aggregated'
    assert error.fix == "set vllm_omni_layout to one of: pd, aggregated"


def test_strings_must_match_their_pattern():
    assert check_str("qwen3-omni", "s", r"[a-z0-9-]+", "a name", "qwen") == "qwen3-omni"
    assert refusal(check_str, "a b", "s", r"[a-z]+", "a name", "qwen").problem == '"a b" is not a name'
    assert "quoted string" in refusal(check_str, 3, "s", r"[a-z]+", "a name", "qwen").fix


@pytest.mark.parametrize(("value", "problem"), [
    ("fe80::1", "is an IPv6 address"),
    ("0.0.0.0", "cannot be a peer address"),
    ("224.0.0.1", "cannot be a peer address"),
    ("255.255.255.255", "cannot be a peer address"),
    ("10.0.0.256", "is not an IP address"),
    (167772171, "must be an IPv4 address string, got integer"),
])
def test_peer_addresses_are_ipv4_unicast(value, problem):
    assert problem in refusal(check_ipv4, value, "ansible_host").problem


def test_an_address_is_normalized():
    assert check_ipv4(" 10.0.0.11 ", "a") == "10.0.0.11"


def test_gpu_lists_are_sorted_whole_numbers_each_once():
    assert check_gpu_list([3, 0, 1], "g") == [0, 1, 3]
    assert refusal(check_gpu_list, [0, 0], "g").problem == "lists GPU 0 twice"
    assert refusal(check_gpu_list, [], "g").problem == "is an empty list"
    assert refusal(check_gpu_list, "0,1", "g").problem == 'is a string ("0,1"), not a list of GPU indices'
    assert "GPU indices are whole numbers" in refusal(check_gpu_list, [0, True], "g").problem
    assert refusal(check_gpu_list, [-1], "g").problem.startswith("holds -1")


def test_port_ranges_are_two_unprivileged_ports():
    assert check_port_range([16000, 16999], "r") == [16000, 16999]
    assert refusal(check_port_range, [16000], "r").problem == "must be a list of two ports [first, last], got [16000]"
    assert "between 1024 and 65535" in refusal(check_port_range, [80, 90], "r").problem


def test_values_are_shown_as_written_and_cut_short():
    assert show({"b": 1, "a": [True, None]}) == '{"a": [true, null], "b": 1}'
    assert show("x" * 100).endswith("...") and len(show("x" * 100)) == 80
    assert [type_name(v) for v in (True, 1, 1.5, "s", [], {}, None)] == [
        "boolean", "integer", "number", "string", "list", "mapping", "null"]
