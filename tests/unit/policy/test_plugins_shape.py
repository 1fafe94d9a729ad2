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


def imports_of(path) -> set[str]:
    """The plugin_utils modules one module imports (relative imports resolved, absolute collection imports too)."""
    module = path.relative_to(PLUGINS).with_suffix("").as_posix().replace("/", ".")
    package = module.rsplit(".", 1)[0] if not module.endswith("__init__") else module.removesuffix(".__init__")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = (node.module or "").removeprefix("ansible_collections.vllm_omni.serve.plugins.")
            names = [target] + [f"{target}.{alias.name}" for alias in node.names]
            found.update(name for name in names if (PLUGINS / (name.replace(".", "/") + ".py")).is_file())
    return found - {module}


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (module -> modules it imports), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node, path):
        state[node] = 1
        for child in sorted(graph.get(node, ())):
            if state.get(child) == 1:
                return [*path[path.index(child):], child] if child in path else [node, child]
            if child not in state:
                found = visit(child, [*path, child])
                if found:
                    return found
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return []


def test_the_cycle_finder_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_import_cycle_under_plugins():
    graph = {path.relative_to(PLUGINS).with_suffix("").as_posix().replace("/", "."): imports_of(path)
             for path in python_files()}
    assert "plugin_utils.plan._ports" in graph["plugin_utils.plan._pipelines"]  # the measure sees relative imports
    assert "plugin_utils.plan._planner" in graph["filter.plan"]  # and the collection's absolute ones
    assert cycle(graph) == [], "break this import cycle"
