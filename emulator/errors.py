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
    built-in's): the user's error, not flemu's. The message names the component (its kind,
    registered name, class and file), the method, the round and virtual time, what was wrong
    and what the contract is (emulator/boundary/). A run stopped by one keeps its run
    directory with status `failed` (exit status 2)."""

    def __init__(self, message: str, component: str | None = None, method: str | None = None,
                 round: int | None = None, virtual_time: float | None = None, client: int | None = None):
        self.component, self.method, self.round, self.virtual_time = component, method, round, virtual_time
        self.client = client
        self.what = message
        super().__init__(message)

    def __str__(self) -> str:
        where = []
        if self.round is not None:
            where.append(f"round {self.round}")
        if self.virtual_time is not None:
            where.append(f"virtual time {self.virtual_time:.6g} s")
        head = self.component or ""
        if self.method:
            head += f".{self.method}" if head else self.method
        if self.client is not None:
            head += f" for client {self.client}"
        at = f" in {' at '.join(where)}" if where else ""
        return f"contract broken by {head}{at}: {self.what}" if head else self.what

    def record(self) -> dict:
        """What summary.json keeps of it (`error`)."""
        return {"type": "ContractError", "message": str(self), "component": self.component,
                "method": self.method, "round": self.round, "virtual_time": self.virtual_time,
                "client": self.client}


class InvariantError(FlemuError):
    """A post-run invariant does not hold: a bug in flemu, not in the scenario."""
