"""Errors flemu raises on purpose."""
from __future__ import annotations


class FlemuError(Exception):
    """Base class of flemu's own errors."""


class ScenarioError(FlemuError):
    """A scenario does not validate. Carries every problem found, each naming its YAML path."""

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None):
        self.problems = list(problems)
        self.source = source
        super().__init__(self.format())

    def __str__(self) -> str:
        return self.format()

    def format(self) -> str:
        head = f"{self.source}: " if self.source else ""
        n = len(self.problems)
        lines = [f"{head}{n} problem{'s' if n != 1 else ''} in the scenario:"]
        for path, msg in self.problems:
            lines.append(f"  {path or '<root>'}: {msg}")
        return "\n".join(lines)


class DivergedError(FlemuError):
    """Training produced a non-finite loss or parameter vector."""


class ContractError(FlemuError):
    """A component broke its contract where its result crossed into the engine (a plugin's or a
    built-in's): the message names the component, the method, the round and the contract."""


class InvariantError(FlemuError):
    """A post-run invariant does not hold: a bug in flemu, not in the scenario."""
