"""flemu's public extension surface: the one import path promised to users
(docs/write-your-own.md). Everything a plugin extends or calls is here:

    from emulator.api import register, Params, FedAvg, FedAvgParams, Aggregation

- registration: `register` (a function, or a class / function decorator; a class that does
  not extend its kind's base or leaves an abstract method undefined raises
  `RegistrationError` at once), `Params` (and
  `FleetSize`, what `Params.fleet_problems` gets), and
  helpers that register data and models written in code (`register_arrays`,
  `register_torch_dataset`, `register_module`) and a compute model from a function
  (`register_step_time`);
- algorithms: `Algorithm`, the built-ins with their parameter models (to extend), the
  message and result types (`Broadcast`, `Upload`, `Arrival`, `Rows`, `Aggregation`),
  `AlgoContext`, the declared capabilities (`BackgroundTraining`, `VersionedModel`; cohort
  eligibility is the class keyword `cohort_path=True`, read as `Algorithm.cohort_path`);
- client-side training (docs/local-training.md): `LocalSpec`; the training kinds
  `LocalRule` (functional, batched), `OptimizerRule` (any torch.optim), `TrainFunction`
  (your own loop); the functional pieces `LossTerm`, `PerSampleTransform`, `GradTransform`
  and the built-in `ProxTerm`, `ClipPerSample`, `ClipNorm`, `GaussianNoise`;
- data and models: `FederatedData`, `DatasetContext`, `ModelContext` (what dataset and model
  factories get and return) a model whose output is per-sample losses declares it by subclassing
  `DirectLoss` (`ClosedFormLoss` if it also gives its gradient in closed form), one that may start
  at zero by subclassing `StartsAtZero`; partition factories get (params, labels, num_clients, rng, path);
- device models: `ComputeModel` / `StepClock` / `FixedClock`, `Availability` (`RoundAvailability`
  for per-round models), `LinkModel` (the base of links; `Link` the latency + bandwidth one),
  and `GroupContext` (what their factories get);
- protocols and executors: `Protocol`, `Executor` (the abstract bases of `protocol.name` and
  `executor.name`);
- codecs (docs/algorithms/compression.md): `Codec`, the base of `network.codec.up` / `down`;
  the capability `EntropyCoded` (a reported entropy-coded size); `ExchangeCodec`, an upload
  that is an exchange over the aggregation (PowerSGD), with the `Layout` it sees and the
  `ExchangeBytes` it gives;
- selection (docs/selection.md): `Selector` (the declared base: `select(ctx)`,
  `observe(outcomes)`), `SelectionContext`, `Chosen` (ids with aggregation weights),
  `RoundOutcomes`, `Status`, `Profile`, `History`, `ClientColumns` (per-client state grown on
  first write), `Uniforms` and `wswor` (weighted sampling without replacement), and
  `SelectionParams` / `KOrFraction` (a selection block's parameters and its declared needs);
- callbacks: `Callback`, `RunContext`;
- running: `run`, `load`, `RunResult`, and the errors.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence, Type

import numpy as np

from devices.availability import NEVER, Availability, RoundAvailability
from devices.compute import ComputeModel, FixedClock, StepClock, Work
from devices.network import InstantLink, Link, LinkModel
from devices.selectors import (ClientColumns, Chosen, History, Profile, RoundOutcomes, SelectionContext, Selector,
                               Status, Uniforms, wswor)

from .algorithms.base import (AlgoContext, Aggregation, Algorithm, Arrival, BackgroundTraining, Broadcast,
                              Rows, Upload, VersionedModel, sample_weights, size_weights, weighted_sum)
from .algorithms.fedasync import FedAsync, FedAsyncParams
from .algorithms.fedavg import FedAvg, FedAvgParams
from .algorithms.fedprox import FedProx, FedProxParams
from .algorithms.scaffold import Scaffold, ScaffoldParams
from .algorithms.state import ClientStates
from .runs.callbacks import Callback, RunContext
from .compute.executor import Executor
from .compute.jobs import JobFuture, LocalSpec
from .compute.pieces import (ClipNorm, ClipPerSample, FunctionalModel, GaussianNoise, GradTransform, LossTerm,
                             PerSampleTransform, ProxTerm, StepContext, clip_to)
from .compute.training import (ClientTraining, GradientTraining, LocalRule, OptimizerRule, TrainContext,
                               TrainFn, TrainFunction)
from .boundary.component import describe_function
from .codecs.base import Codec, EntropyCoded
from .codecs.exchange import ExchangeBytes, ExchangeCodec, Layout
from .errors import ContractError, DivergedError, FlemuError, InvariantError, ScenarioError
from .scenario.fleet import GroupContext
from .scenario.selection_params import KOrFraction, SelectionParams
from .registry import FleetSize, Params, RegistrationError, register
from .runs.runner import RunResult
from .sim.protocols.base import Protocol
from .workloads.data import FederatedData
from .workloads.datasets import DatasetContext
from .workloads.models import ClosedFormLoss, DirectLoss, ModelContext, StartsAtZero


def run(source: Any, overrides: Sequence[str] = (), seed: Optional[int] = None, out: Any = None,
        progress: Optional[Callable[[dict], None]] = None, callbacks: Sequence[Callback] = (),
        plugins: Sequence[str] = ()) -> RunResult:
    """Run a scenario (a file path, YAML text, a dict or a validated scenario) and write its
    run directory; `callbacks` are Callback instances, `plugins` files or modules to import
    first (recorded in config.yaml)."""
    from .runs.runner import run as _run
    return _run(source, overrides=overrides, seed=seed, out=out, progress=progress, callbacks=callbacks,
                plugins=plugins)


def load(source: Any, overrides: Sequence[str] = (), seed: Optional[int] = None, plugins: Sequence[str] = ()) -> Any:
    """Validate a scenario (its plugins imported first) -> the scenario object `run` takes."""
    from .scenario.schema import load as _load
    return _load(source, overrides, seed, plugins=plugins)


# --------------------------------------------------------------------------- data in code
def register_arrays(name: str, x_train: Any, y_train: Any, x_test: Any, y_test: Any, *,
                    num_classes: Optional[int] = None, client_indices: Optional[list] = None,
                    description: Optional[str] = None) -> None:
    """Register a classification dataset held in arrays: features (N, ...) of any shape (a
    model gets them as they are, float32), integer labels. With `client_indices` (one index
    array per client) the dataset owns its split (`partition: natural`); otherwise any
    partition (iid, dirichlet, ...) splits it."""
    xtr, xte = np.asarray(x_train, dtype=np.float32), np.asarray(x_test, dtype=np.float32)
    ytr, yte = np.asarray(y_train).astype(np.int64).reshape(-1), np.asarray(y_test).astype(np.int64).reshape(-1)
    if len(xtr) != len(ytr) or len(xte) != len(yte):
        raise ValueError(f"dataset {name!r}: {len(ytr)} labels for {len(xtr)} training samples, "
                         f"{len(yte)} for {len(xte)} test samples")
    classes = int(num_classes if num_classes is not None else max(ytr.max(initial=0), yte.max(initial=0)) + 1)

    def factory(p: Params, ctx: DatasetContext) -> FederatedData:
        idx = None if client_indices is None else [np.asarray(i, dtype=np.int64) for i in client_indices]
        if idx is not None and len(idx) != ctx.num_clients:
            raise ScenarioError([(f"{ctx.path}.name", f"dataset {name!r} is split for {len(idx)} clients; "
                                                      f"clients.count is {ctx.num_clients}")])
        return FederatedData(name, xtr, ytr, xte, yte, classes, tuple(xtr.shape[1:]),
                             client_indices=idx, natural=idx is not None)

    register("dataset", name, Params,
             description or f"arrays registered in code: {len(ytr)} training, {len(yte)} test samples, "
                            f"{classes} classes", factory)


def register_torch_dataset(name: str, train: Any, test: Any, *, num_classes: Optional[int] = None,
                           description: Optional[str] = None) -> None:
    """Register a torch `Dataset` pair (items `(features, label)`), read once into arrays."""
    import torch

    def arrays(ds):
        xs, ys = zip(*[(torch.as_tensor(x), int(y)) for x, y in (ds[i] for i in range(len(ds)))])
        return torch.stack(xs).numpy(), np.array(ys, dtype=np.int64)

    (xtr, ytr), (xte, yte) = arrays(train), arrays(test)
    register_arrays(name, xtr, ytr, xte, yte, num_classes=num_classes,
                    description=description or f"torch Dataset registered in code ({len(ytr)} training samples)")


def register_module(name: str, build: Callable[[ModelContext], Any], *, description: Optional[str] = None) -> None:
    """Register a model: `build(ctx)` returns any `torch.nn.Module` whose output is the
    logits of a batch (ctx.input_shape, ctx.num_classes describe the data)."""
    register("model", name, Params, description or f"nn.Module built by {getattr(build, '__qualname__', build)}",
             lambda p, ctx: build(ctx))


# --------------------------------------------------------------------------- devices in code
class FunctionCompute(ComputeModel):
    """Every step of a client in a round takes `fn(client, round, rng)` seconds (positive
    and finite: anything else is an error, never a silent zero)."""

    random = True

    def __init__(self, fn: Callable[[int, int, np.random.Generator], float], name: str = "function"):
        self.fn, self.name = fn, name

    def clock(self, client: int, round_: int, rng: Any, now: float = 0.0, work: Optional[Work] = None,
              draw: Any = None) -> StepClock:
        v = self.fn(client, round_, rng)
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                or not (v > 0 and math.isfinite(v)):
            raise ContractError(f"gave the step time {v!r}; it must be a positive finite number of seconds",
                                describe_function("compute model", self.fn, self.name), "fn", round_, client=client)
        return FixedClock(float(v))


def register_step_time(name: str, fn: Callable[[int, int, np.random.Generator], float], *,
                       description: Optional[str] = None) -> None:
    """Register a compute model from a function: `fn(client, round, rng)` is the seconds
    each local step of `client` takes in `round` (`rng`: that client's stream of the round)."""
    register("compute", name, Params, description or f"step time from {getattr(fn, '__qualname__', fn)}",
             lambda p, ctx=None: FunctionCompute(fn, name))


__all__ = [
    "register", "Params", "FleetSize", "register_arrays", "register_torch_dataset", "register_module", "register_step_time",
    "Algorithm", "AlgoContext", "Broadcast", "Upload", "Arrival", "Rows", "Aggregation", "ClientStates",
    "BackgroundTraining", "VersionedModel",
    "LocalSpec", "JobFuture",
    "ClientTraining", "GradientTraining", "LocalRule", "OptimizerRule", "TrainFunction", "TrainContext", "TrainFn",
    "LossTerm", "PerSampleTransform", "GradTransform", "StepContext", "FunctionalModel",
    "ProxTerm", "ClipPerSample", "ClipNorm", "GaussianNoise", "clip_to", "sample_weights", "size_weights", "weighted_sum",
    "FedAvg", "FedAvgParams", "FedProx", "FedProxParams", "Scaffold", "ScaffoldParams", "FedAsync", "FedAsyncParams",
    "FederatedData", "DatasetContext", "ModelContext", "ClosedFormLoss", "DirectLoss", "StartsAtZero",
    "ComputeModel", "StepClock", "FixedClock", "Work", "FunctionCompute", "Availability", "RoundAvailability", "NEVER",
    "Link", "LinkModel", "InstantLink", "GroupContext",
    "Selector", "SelectionContext", "Chosen", "RoundOutcomes", "Status", "Profile", "History", "ClientColumns",
    "Uniforms", "wswor", "SelectionParams", "KOrFraction",
    "Protocol", "Executor", "Codec", "EntropyCoded", "ExchangeCodec", "Layout", "ExchangeBytes",
    "Callback", "RunContext", "run", "load", "RunResult",
    "ScenarioError", "FlemuError", "DivergedError", "InvariantError", "RegistrationError", "ContractError",
]
