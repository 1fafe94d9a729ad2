# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""How the planner reports what is wrong with an inventory: ``Problem``, ``PlanError`` and the collector.

Every check adds to one ``Problems`` collector instead of raising, so a user sees every problem of
an inventory in one run, each naming where it is (a host, all hosts, a group), the variable and
the fix. The planner raises ``PlanError`` where later checks need what earlier ones found valid
(host names, the deployment's settings), and once every check has run.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._checkers import SettingError

# Where a deployment-wide setting's problem is: it is one value for every host.
ALL_HOSTS = "all hosts (group_vars)"


@dataclass(frozen=True)
class Problem:
    where: str
    variable: str
    problem: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.where}: {self.variable} {self.problem}"
        if self.fix:
            text += f" -> {self.fix}"
        return text


class Refusal(str):
    """A problem line that carries its own fix, where the caller's fix for its kind would point at the wrong thing
    (the controller's checks of secrets and TLS files, which report lines, not ``Problem``s)."""

    fix: str

    def __new__(cls, problem: str, fix: str):
        refusal = super().__new__(cls, problem)
        refusal.fix = fix
        return refusal

    def __reduce__(self):  # a result crosses from Ansible's worker to its main process pickled
        return Refusal, (str(self), self.fix)


class PlanError(Exception):
    """The inventory cannot be planned. ``problems`` lists every reason; nothing was changed."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        count = len(problems)
        head = f"vllm_omni.serve: the inventory has {count} problem{'s' if count != 1 else ''}; nothing was changed."
        super().__init__("\n".join([head] + [f"  - {p.line()}" for p in problems]))


class Problems:
    """The problems found so far; ``raise_if_any`` turns them into one ``PlanError``."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def __len__(self) -> int:
        return len(self.items)

    def add(self, where: str, variable: str, problem: str, fix: str = "") -> None:
        self.items.append(Problem(where, variable, problem, fix))

    def setting(self, where: str, name: str, error: SettingError) -> None:
        self.add(where, name, error.problem, error.fix)

    def raise_if_any(self) -> None:
        if self.items:
            raise PlanError(_merge_hosts(self.items))


def _merge_hosts(problems: list[Problem]) -> list[Problem]:
    """One line for a problem that several hosts share (e.g. a misspelled -e variable), and once for one that
    per-host checks found again for the whole deployment (a deployment setting too small for every host)."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    order: list[tuple[str, str, str] | Problem] = []
    seen: set[tuple[str, str, str, str]] = set()
    for problem in problems:
        if not problem.where.startswith("host "):
            key = (problem.where, problem.variable, problem.problem, problem.fix)
            if key not in seen:
                seen.add(key)
                order.append(problem)
            continue
        key = (problem.variable, problem.problem, problem.fix)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(problem.where[len("host "):])
    merged = []
    for item in order:
        if isinstance(item, Problem):
            merged.append(item)
            continue
        hosts = groups[item]
        where = f"host {hosts[0]}" if len(hosts) == 1 else (
            f"hosts {', '.join(hosts[:3])}" + (f" and {len(hosts) - 3} more" if len(hosts) > 3 else ""))
        merged.append(Problem(where, *item))
    return merged


merge_hosts = _merge_hosts  # for the modules that collect problems without a Problems collector


def host_where(host: str) -> str:
    """Where a problem of one host is; ``_merge_hosts`` relies on this form."""
    return f"host {host}"
