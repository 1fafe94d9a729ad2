"""The YAML emitter: whatever it writes, YAML 1.1 loaders (PyYAML, OmegaConf's base) read back unchanged."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.texts import _yaml

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63)
           | st.floats(allow_nan=False) | st.text(max_size=20))
documents = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(max_size=10), documents, max_size=6))
def test_round_trip_through_pyyaml(document):
    assert yaml.safe_load(_yaml.dump(document)) == document


def test_words_yaml_would_reinterpret_are_quoted():
    text = _yaml.dump({"a": "yes", "b": "0", "c": "1e5", "d": "null", "e": "", "f": "0,1", "g": "On"})
    assert yaml.safe_load(text) == {"a": "yes", "b": "0", "c": "1e5", "d": "null", "e": "", "f": "0,1", "g": "On"}


def test_floats_stay_floats_for_yaml_1_1_loaders():
    assert _yaml.dump({"x": 1e-05, "w": 1.0, "z": 1e16}) == "x: 1.0e-05\nw: 1.0\nz: 1.0e+16\n"
    assert yaml.safe_load(_yaml.dump({"x": 1e-05, "z": 1e16})) == {"x": 1e-05, "z": 1e16}


def test_output_is_block_style_in_insertion_order():
    assert _yaml.dump({"b": [1, {"c": "d", "e": []}], "a": {}}) == "b:\n- 1\n- c: d\n  e: []\na: {}\n"
