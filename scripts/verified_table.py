"""The README's "What is verified, and where" table, from data/verified.yml and the committed results it reads.

A measured number in that table is never typed: each row's evidence holds ``{name}`` where a number goes and its
``facts`` say where the number is read (data/verified.yml's header has the forms). scripts/gen_docs.py writes the
table; this module resolves the facts and fails, naming the row and the fact, on one that does not resolve.
"""

from __future__ import annotations

import json
import re
import string
from functools import cache
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "verified.yml"
# What a measured number looks like in prose; tests/unit/policy/test_verified_table.py forbids it outside {names}.
MEASURED = re.compile(r"\b\d[\d,]*(\.\d+)? of \d[\d,]*\b|\b\d+(\.\d+)? ?(s|ms)\b|\b\d+\.\d+x\b")


class FactError(Exception):
    pass


@cache
def _json(path: str):
    return json.loads((REPO / path).read_text())


def _at(document, path: str):
    value = document
    for key in path.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


def _read(spec: dict, resolved: dict):
    if "ratio" in spec:
        numerator, denominator = spec["ratio"]
        return resolved[numerator] / resolved[denominator]
    document = _json(spec["file"])
    if "paths" in spec:
        values = [_at(document, path) for path in spec["paths"]]
        return {"min": min, "max": max}[spec["op"]](values)
    value = _at(document, spec["path"])
    if spec.get("op") == "len":
        return len(value)
    if spec.get("op") == "count_ok":  # the requests of a list that were answered (HTTP 200)
        return sum(1 for item in value if item.get("status") == 200)
    return value


def _shown(value, digits: int | None) -> str:
    if digits is not None:
        return f"{value:,.{digits}f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def placeholders(evidence: str) -> list[str]:
    return [name for _text, name, _spec, _conv in string.Formatter().parse(evidence) if name]


def row_evidence(row: dict) -> str:
    """The row's evidence with every {name} replaced by its fact, read now."""
    resolved: dict = {}
    for name, spec in (row.get("facts") or {}).items():  # in order: a ratio reads facts above it
        try:
            resolved[name] = _read(spec, resolved)
        except (OSError, KeyError, IndexError, ValueError, TypeError, ZeroDivisionError) as error:
            raise FactError(f"data/verified.yml, row {row['claim']!r}, fact {name}: {spec} does not resolve "
                            f"({type(error).__name__}: {error})") from error
    shown = {name: _shown(value, (row["facts"][name] or {}).get("digits")) for name, value in resolved.items()}
    missing = sorted(set(placeholders(row["evidence"])) - set(shown))
    if missing:
        raise FactError(f"data/verified.yml, row {row['claim']!r}: no fact for {', '.join(missing)}")
    return row["evidence"].format(**shown)


def rows() -> list[dict]:
    return yaml.safe_load(DATA.read_text())["rows"]


def verified_md() -> str:
    lines = ["| Claim | Evidence |", "| --- | --- |"]
    lines += [f"| {row['claim']} | {row_evidence(row)} |" for row in rows()]
    return "\n".join(lines)
