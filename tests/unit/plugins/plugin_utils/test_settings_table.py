"""data/settings.yml, the one table of settings, as plan/_settings.py loads it: a mistake in an entry fails the
first import with the entry's name and what is wrong, never a user's run."""

from __future__ import annotations

import pytest

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _settings
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._checkers import SettingError


def test_every_entry_became_a_setting_with_a_working_check():
    raw = _settings._load_yaml(_settings.DATA_DIR / "settings.yml")["settings"]
    assert [entry["name"] for entry in raw] == [setting.name for setting in _settings.SETTINGS]
    assert len(_settings.BY_NAME) == len(raw), "a name appears twice in data/settings.yml"
    for setting in _settings.SETTINGS:
        if setting.default is not None:  # every default passes its own check
            setting.validate(setting.default)


def test_a_check_with_arguments_binds_them():
    check = _settings._checker("vllm_omni_x", {"kind": "int", "low": 1, "high": 3})
    assert check(2, "vllm_omni_x") == 2
    with pytest.raises(SettingError) as refused:
        check(4, "vllm_omni_x")
    assert "3" in str(refused.value)
    assert _settings._checker("vllm_omni_y", {"kind": "choice", "choices": ["a", "b"]})("b", "vllm_omni_y") == "b"
    assert _settings._checker("vllm_omni_z", "host_platform")("auto", "vllm_omni_z") == "auto"


@pytest.mark.parametrize("entry, words", [
    ({"name": "vllm_omni_x", "scope": "deployment", "type": "int", "doc": "d", "check": "nope"}, "no checker 'nope'"),
    ({"name": "vllm_omni_x", "scope": "deployment", "type": "int", "doc": "d", "check": {"kind": "int", "lo": 1}},
     "check int"),
    ({"name": "vllm_omni_x", "scope": "cluster", "type": "int", "doc": "d"}, "scope 'cluster'"),
    ({"name": "vllm_omni_x", "scope": "host", "type": "int"}, "fields"),
    ({"name": "vllm_omni_x", "scope": "host", "type": "int", "doc": "d", "defualt": 1}, "fields"),
])
def test_a_wrong_entry_is_refused_with_its_name(entry, words):
    with pytest.raises(ValueError) as error:
        _settings._setting(entry)
    assert "data/settings.yml vllm_omni_x" in str(error.value) and words in str(error.value)
