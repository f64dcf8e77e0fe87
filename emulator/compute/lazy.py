"""Lazy values: results that are computed only when something reads them.

A `JobFuture` is the result of a `TrainJob`; a `Derived` is a function of other values
(lazy or not). Reading `.value()` resolves everything needed, in dependency order, and
batched across clients by the executor: `resolve([v1, v2, ...])` does it for many values
at once. Once resolved, a lazy keeps its value and drops its inputs, so chains of
per-client state collapse as soon as they are read.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable


class Lazy:
    __slots__ = ("_value", "_done")

    def __init__(self):
        self._value = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def inputs(self) -> tuple:
        return ()

    def value(self) -> Any:
        if not self._done:
            resolve([self])
        return self._value

    def _set(self, v):
        self._value = v
        self._done = True


class Derived(Lazy):
    """fn(*args) computed when read; args may be lazy."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable, *args):
        super().__init__()
        self.fn, self.args = fn, args

    def inputs(self):
        return self.args

    def _compute(self):
        self._set(self.fn(*(force(a) for a in self.args)))
        self.fn = self.args = None


class ExecutorFuture(Lazy):
    """A lazy that an executor computes (`executor.run_all` sets it): a job's or a cohort's
    future. `resolve` runs these level by level; every other lazy is a function of them."""

    __slots__ = ("job", "executor")

    def __init__(self, job, executor):
        super().__init__()
        self.job, self.executor = job, executor


def derived(fn: Callable, *args):
    """fn(*args) now if no argument is lazy or unresolved, else a lazy `Derived`."""
    if any(isinstance(a, Lazy) and not a.done for a in args):
        return Derived(fn, *args)
    return fn(*(force(a) for a in args))


def force(x):
    """The value of x (resolving it if it is lazy)."""
    if isinstance(x, Lazy):
        return x.value()
    return x


def resolve(values: Iterable) -> list:
    """Resolve every lazy in `values`, computing the jobs they need level by level
    (a job whose start depends on another job runs after it), each level batched."""
    values = list(values)
    pending_jobs: dict[int, Any] = {}
    level: dict[int, int] = {}

    def visit(node) -> int:
        """Depth of unresolved jobs below `node` (0: none)."""
        if not isinstance(node, Lazy) or node.done:
            return 0
        key = id(node)
        if key in level:
            return level[key]
        below = max((visit(a) for a in node.inputs()), default=0)
        if isinstance(node, ExecutorFuture):
            lv = below + 1
            pending_jobs[key] = node
        else:
            lv = below
        level[key] = lv
        return lv

    for v in values:
        visit(v)
    by_level: dict[int, list] = {}
    for key, fut in pending_jobs.items():
        by_level.setdefault(level[key], []).append(fut)
    for lv in sorted(by_level):
        futs = by_level[lv]
        by_exec: dict[int, list] = {}
        for f in futs:
            by_exec.setdefault(id(f.executor), []).append(f)
        for group in by_exec.values():
            group[0].executor.run_all(group)
    return [force_derived(v) for v in values]


def force_derived(x):
    if not isinstance(x, Lazy) or x.done:
        return x._value if isinstance(x, Lazy) else x
    if isinstance(x, Derived):
        for a in x.args:
            force_derived(a)
        x._compute()
        return x._value
    raise RuntimeError("unresolved job future after resolve()")
