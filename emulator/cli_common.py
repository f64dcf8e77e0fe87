"""What every `flemu` command module shares: the console results are printed on, and the one
way a command refuses bad input (its message on stderr, exit 2)."""
from __future__ import annotations

import typer
from rich.console import Console

out = Console(soft_wrap=True)


def fail(err) -> None:
    """Refuse: `err` on stderr, exit 2 (docs/bad-input.md)."""
    typer.echo(str(err), err=True)
    raise typer.Exit(code=2)
