"""The shape issue 28 asks of plugins/: no file over 400 lines, no function over 50 lines.

A function's length runs from its ``def`` line to the last line of its body (decorators excluded), nested
functions counted on their own as well as inside the function around them.
"""

from __future__ import annotations

import ast
import textwrap

from unitlib import REPO

PLUGINS = REPO / "plugins"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 50


def python_files() -> list:
    return sorted(PLUGINS.rglob("*.py"))


def long_functions(source: str) -> list[tuple[str, int, int]]:
    """(name, def line, length) of every function in ``source`` longer than MAX_FUNCTION_LINES."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append((node.name, node.lineno, length))
    return found


def test_the_measure_sees_plugins():
    names = {path.relative_to(PLUGINS).as_posix() for path in python_files()}
    assert "plugin_utils/plan/_planner.py" in names and len(names) > 50


def test_the_measure_counts_from_def_to_the_end_of_the_body():
    body = "".join(f"x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    fits = "@staticmethod\n@property\ndef fits():\n" + textwrap.indent(body, "    ")
    assert long_functions(fits) == []  # decorators do not count: the def line and 49 lines are 50
    assert long_functions(fits + "    return 1\n") == [("fits", 3, MAX_FUNCTION_LINES + 1)]
    inner = "def inner():\n" + textwrap.indent(body + body, "    ")
    nested = "class Outer:\n    def method(self):\n" + textwrap.indent(inner + "return 1\n", "        ")
    assert [(name, length) for name, _line, length in long_functions(nested)] == [
        ("method", 2 * MAX_FUNCTION_LINES + 1), ("inner", 2 * MAX_FUNCTION_LINES - 1)]


def test_no_file_under_plugins_is_over_400_lines():
    too_long = {path.relative_to(REPO).as_posix(): n for path in python_files()
                if (n := len(path.read_text().splitlines())) > MAX_FILE_LINES}
    assert too_long == {}, f"split these files (lines): {too_long}"


def test_no_function_under_plugins_is_over_50_lines():
    too_long = [f"{path.relative_to(REPO).as_posix()}:{line} {name} ({length} lines)"
                for path in python_files() for name, line, length in long_functions(path.read_text())]
    assert too_long == [], "split these functions into helpers: " + "; ".join(too_long)
