"""Every unit test can fail: it asserts (or expects an exception) itself, or calls a helper that does.

Helpers are the functions of the test's own file and of the shared test libraries (unitlib, testlib,
conftest), followed through the helpers they call.
"""

from __future__ import annotations

import ast

from unitlib import REPO

UNIT = REPO / "tests" / "unit"
LIBRARIES = [UNIT / "unitlib.py", UNIT / "devicelib.py", UNIT / "conftest.py", REPO / "tests" / "testlib.py"]
# The directories tests/unit/conftest.py puts on the path: ansible-test units imports test modules as packages of
# the collection, so a module beside a test in any other directory is not importable there (plain pytest finds it).
ON_PATH = (UNIT, REPO / "tests")
FAILS = ("pytest.raises", "pytest.fail", "pytest.skip", "pytest.xfail")


def _checks_itself(node: ast.AST, source: str) -> bool:
    text = ast.get_source_segment(source, node) or ""
    return any(isinstance(n, ast.Assert) for n in ast.walk(node)) or any(word in text for word in FAILS)


def _called(node: ast.AST) -> set[str]:
    names = set()
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        if isinstance(call.func, ast.Name):
            names.add(call.func.id)
        elif isinstance(call.func, ast.Attribute):
            names.add(call.func.attr)
    return names


def _functions(path) -> list[tuple[str, bool, set[str]]]:
    source = path.read_text()
    return [(node.name, _checks_itself(node, source), _called(node)) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _checking_helpers(functions: list[tuple[str, bool, set[str]]]) -> set[str]:
    checking = {name for name, checks, _calls in functions if checks and not name.startswith("test")}
    grown = True
    while grown:
        before = len(checking)
        checking |= {name for name, _checks, calls in functions if not name.startswith("test") and calls & checking}
        grown = len(checking) > before
    return checking


def unchecked_tests(path) -> list[str]:
    library = [f for lib in LIBRARIES for f in _functions(lib)]
    functions = _functions(path)
    checking = _checking_helpers(library + functions)
    return [name for name, checks, calls in functions
            if name.startswith("test") and not checks and not calls & checking]


def test_the_scan_finds_a_test_without_a_check(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text("def helper(x):\n    assert x\n\n\ndef quiet(x):\n    return x\n\n\n"
                      "def test_checked():\n    helper(1)\n\n\ndef test_raises():\n    with pytest.raises(KeyError):\n"
                      "        {}[1]\n\n\ndef test_unchecked():\n    quiet(1)\n")
    assert unchecked_tests(sample) == ["test_unchecked"]


def test_every_unit_test_checks_something():
    files = sorted(UNIT.rglob("test_*.py"))
    assert len(files) > 40
    found = [f"{path.relative_to(REPO).as_posix()}::{name}" for path in files for name in unchecked_tests(path)]
    assert found == [], "these tests assert nothing (directly or through a helper): " + ", ".join(found)


def imports_of_neighbours(path) -> list[str]:
    """Top-level names ``path`` imports that only its own directory provides (not tests/unit/ or tests/)."""
    tree = ast.parse(path.read_text())
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module.split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    if path.parent in ON_PATH:
        return []
    return sorted(name for name in names if (path.parent / f"{name}.py").exists())


def test_the_scan_finds_an_import_of_a_neighbour(tmp_path):
    (tmp_path / "test_one.py").write_text("def helper():\n    return 1\n")
    (tmp_path / "test_two.py").write_text("import json\nfrom test_one import helper\n")
    assert imports_of_neighbours(tmp_path / "test_two.py") == ["test_one"]
    assert imports_of_neighbours(tmp_path / "test_one.py") == []


def test_unit_tests_import_helpers_from_the_directories_on_the_path():
    found = {path.relative_to(REPO).as_posix(): imports_of_neighbours(path) for path in sorted(UNIT.rglob("*.py"))}
    found = {path: names for path, names in found.items() if names}
    assert found == {}, ("ansible-test units cannot import these (a test's own directory is not on its path): "
                         f"{found}; move what they share into tests/unit/ (devicelib.py, unitlib.py)")
