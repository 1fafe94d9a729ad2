# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""A small, deterministic YAML emitter for the documents the planner renders.

Why not ``yaml.safe_dump``: it is slow in pure Python (the render benchmark plans thousands of
pipelines), its output depends on whether libyaml is installed, and its float and string
quoting rules are YAML 1.1-specific in ways that are easy to trip over. The documents we emit
hold only dicts (insertion order kept), lists, strings, ints, floats, booleans and None, so a
purpose-built emitter is short and its output is byte-stable across machines.

Every string that is not a plain, unambiguous word is written as a JSON string, which is also
a valid YAML double-quoted scalar (characters outside printable ASCII escaped, astral ones with
YAML's \\U). Floats always carry a dot or an exponent with a dot, so YAML 1.1 loaders (PyYAML,
OmegaConf) read them back as floats.
"""

from __future__ import annotations

import functools
import json
import math
import re

__all__ = ["dump"]

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./+-]*")
# Words a YAML 1.1 or 1.2 loader would turn into something other than a string.
_RESERVED = frozenset(
    w
    for word in ("y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf")
    for w in (word, word.capitalize(), word.upper())
)


def _float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def _scalar(value) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return _string(value)
    raise TypeError(f"cannot emit {type(value).__name__} as YAML")


@functools.lru_cache(maxsize=8192)  # keys and values repeat across thousands of stage configs
def _string(value: str) -> str:
    if _PLAIN.fullmatch(value) and value not in _RESERVED:
        return value
    return _quoted(value)


def _quoted(text: str) -> str:
    """A YAML double-quoted scalar; characters outside printable ASCII as \\u / \\U escapes (YAML has both)."""
    quoted = json.dumps(text, ensure_ascii=False)
    return "".join(c if " " <= c <= "~" else (f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
                   for c in quoted)


def _key(key) -> str:
    if not isinstance(key, str):
        raise TypeError(f"mapping keys must be strings, got {type(key).__name__}")
    return _string(key)


# Scalar text by exact type, the emitter's fast path (a bool is also an int, hence exact types);
# anything else (subclasses, empty collections, what cannot be emitted) goes through _inline.
_BY_TYPE = {str: _string, int: str, float: _float, bool: {True: "true", False: "false"}.__getitem__,
            type(None): lambda _: "null"}


def _emit(value, pad: str, lead: str, out: list[str]) -> None:
    """Append the block lines of a non-empty dict or list: the first starts with ``lead``, the others with ``pad``.

    A collection inside a list gets the list's "- " as the lead of its first line, so no line is
    written twice. Scalars, most of a document, cost one dict lookup and one cached call each.
    """
    by_type = _BY_TYPE
    if isinstance(value, dict):
        for key, item in value.items():
            # Exactly str: str subclasses (Ansible's tagged strings) take the general path.
            key_text = _string(key) if type(key) is str else _key(key)  # pylint: disable=unidiomatic-typecheck
            text = by_type.get(type(item))
            if text is not None:
                out.append(f"{lead}{key_text}: {text(item)}")
            elif isinstance(item, (dict, list)) and item:
                out.append(f"{lead}{key_text}:")
                if isinstance(item, dict):
                    _emit(item, pad + "  ", pad + "  ", out)
                else:
                    _emit(item, pad, pad, out)
            else:
                out.append(f"{lead}{key_text}: {_inline(item)}")
            lead = pad
    else:
        for item in value:
            text = by_type.get(type(item))
            if text is not None:
                out.append(f"{lead}- {text(item)}")
            elif isinstance(item, (dict, list)) and item:
                _emit(item, pad + "  ", lead + "- ", out)
            else:
                out.append(f"{lead}- {_inline(item)}")
            lead = pad


def _inline(value) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)


def dump(document) -> str:
    """Return ``document`` as block-style YAML text ending in a newline."""
    if not isinstance(document, (dict, list)) or not document:
        return _inline(document) + "\n"
    out: list[str] = []
    _emit(document, "", "", out)
    return "\n".join(out) + "\n"
