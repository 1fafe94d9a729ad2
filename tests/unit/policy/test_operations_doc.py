"""docs/operations.md promises that every command it shows is run by a lab test or the demo: check it.

Each ``ansible-playbook vllm_omni.serve.NAME ...`` line of its ``sh`` blocks must match one call of
``playbooks/NAME.yml`` in tests/lab (``playbook("NAME.yml", ...)``), the demo or molecule that passes
every option it shows (``--limit``, ``--check``, ``--diff``, each ``-e`` name); each ``journalctl``
line must be run, with ``-a -u UNIT``, by a lab test for a unit of the same kind.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "operations.md"
CORPUS = [*sorted((REPO / "tests" / "lab").glob("*.py")), REPO / "tests" / "lab" / "demo.sh",
          *sorted((REPO / "molecule").glob("*/*.yml"))]


def doc_commands() -> list[list[str]]:
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(), flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line]


def options(words: list[str]) -> set[str]:
    """The options a command shows: flags other than -i, and the names it sets with -e."""
    shown = set()
    for index, word in enumerate(words):
        if word.startswith("--"):
            shown.add(word)
        elif word == "-e":
            value = words[index + 1]
            shown.update(json.loads(value) if value.startswith("{") else [value.split("=", 1)[0]])
    return shown


def calls(playbook: str) -> list[str]:
    """Every call of the playbook in the tests and the demo: the text from its name to the end of the call."""
    found = []
    for path in CORPUS:
        text = path.read_text()
        for match in re.finditer(rf'playbook\(\s*"{re.escape(playbook)}"|playbooks/{re.escape(playbook)}', text):
            depth, end = 0, match.start()
            for end in range(match.start(), len(text)):
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                if depth < 0 or (depth == 0 and text[end] == "\n" and "playbooks/" in match.group()):
                    break
            found.append(text[match.start():end])
    return found


def test_the_runbook_shows_commands():
    names = [words[0] for words in doc_commands()]
    assert names.count("ansible-playbook") >= 8 and "journalctl" in names


def test_every_playbook_command_of_the_runbook_is_run_as_shown_by_a_test_or_the_demo():
    missing = []
    playbook_commands = [words for words in doc_commands() if words[0] == "ansible-playbook"]
    assert len(playbook_commands) >= 5, "the runbook's ```sh blocks show no ansible-playbook commands: is DOC read?"
    for words in playbook_commands:
        playbook = words[1].removeprefix("vllm_omni.serve.") + ".yml"
        wanted = options(words[2:])
        if not any(all(option in call for option in wanted) for call in calls(playbook)):
            missing.append(f"{' '.join(words)} (no call of {playbook} passes {sorted(wanted)})")
    assert not missing, "\n".join(missing)


def test_every_journal_command_of_the_runbook_is_run_by_a_lab_test():
    corpus = "\n".join(path.read_text() for path in CORPUS)
    journal_commands = [words for words in doc_commands() if words[0] == "journalctl"]
    assert journal_commands, "the runbook's ```sh blocks show no journalctl command: is DOC read?"
    for words in journal_commands:
        unit = words[words.index("-u") + 1]
        kind = re.escape(unit.split("@")[0]) + ("@" if "@" in unit else r"\b")
        assert re.search(rf"journalctl -a -u {kind}", corpus), f"no lab test reads {unit}'s journal with -a"
