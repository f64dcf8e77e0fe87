"""flemu's engine: scenario -> world -> virtual-time run -> run directory.

    import emulator
    res = emulator.run("scenarios/quickstart.yaml", overrides=["algorithm.lr=0.1"])
    res.run_dir, res.metrics   # the run directory and metrics.csv as a DataFrame

What users extend (their own algorithms, data, models, device models, callbacks) is
imported from `emulator.api` (docs/write-your-own.md).
"""
from .errors import DivergedError, FlemuError, InvariantError, ScenarioError  # noqa: F401


def run(source, overrides=(), seed=None, out=None, progress=None, callbacks=(), plugins=()):
    """Run a scenario (path, YAML text, dict or Scenario) -> RunResult(run_dir, metrics, summary).
    `callbacks`: emulator.api.Callback instances; `plugins`: files or modules imported first."""
    from .runs.runner import run as _run
    return _run(source, overrides=overrides, seed=seed, out=out, progress=progress, callbacks=callbacks,
                plugins=plugins)


def load(source, overrides=(), seed=None, plugins=()):
    """Validate a scenario (its plugins imported first) -> Scenario (raises ScenarioError
    listing every problem)."""
    from .scenario.schema import load as _load
    return _load(source, overrides, seed, plugins=plugins)


__all__ = ["run", "load", "ScenarioError", "DivergedError", "InvariantError", "FlemuError"]
