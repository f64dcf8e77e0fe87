"""Build the world of one run from a validated scenario (docs/engine.md, "The world"):
RNG streams, datasets and partitions, models, clients with their device models, the
executor, the recorder and the protocol (which owns time)."""
from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import simpy
import torch

from devices import limits

from .. import registry
from ..algorithms.base import AlgoContext
from ..boundary.algorithm import CheckedAlgorithm
from ..compute.executor import ClientRows, TaskData, pick_device
from ..compute.flat import FlatModel
from ..errors import ContractError, DivergedError, ScenarioError
from ..rng import Streams
from ..workloads.data import FederatedData, IndexRows
from ..workloads.datasets import DatasetContext
from ..workloads.evaluate import ClassificationEval, QuadraticEval, TrainAndTestEval
from ..workloads.keyed import KeyedRows
from ..workloads.local_rows import LocalRows, hold_out, split_test
from ..workloads.models import ModelContext
from ..workloads.partitions import partition_data
from .client_evaluation import ClientEvaluation
from .fleet import Fleet
from .network import NetworkSim
from .recorder import Recorder


FREEZE_FROM = 10_000   # fleets from this size run with their world frozen out of the cyclic GC


@dataclass(eq=False)
class Task:
    """One model being trained: its data, network, algorithm and evaluation."""

    index: int
    data: FederatedData
    net: FlatModel
    algorithm: Any
    batch_size: Optional[int]
    evaluate: Callable
    client_sizes: np.ndarray
    path: str
    buffers: Optional[torch.Tensor] = None    # global BatchNorm statistics (compute/flat.py), None: none
    local: Optional[LocalRows] = None         # each client's local test rows (`evaluation:`), None: none
    checked: Any = None                       # the algorithm's verbs through their boundary (boundary/algorithm.py)


def group_sizes(clients_spec) -> list:
    """Client count of each group (fractions by largest remainder)."""
    from ..workloads.partitions import largest_remainder
    gs = clients_spec.groups
    if gs[0].count is not None:
        return [g.count for g in gs]
    return list(largest_remainder(np.array([g.fraction for g in gs]), clients_spec.count))


def build_task(index, wl, path, N, streams, device, dtype, algo_spec, eval_train: bool = False,
               data_key: Optional[int] = None, evaluation=None) -> Task:
    """Model `index` of the run. Its data and partition are drawn from streams keyed by
    `data_key` (default `index`): workloads with the same dataset and partition blocks share
    one key, so "the same task" trained as several models (docs/algorithms/multimodel.md A20) sees the same
    client data, while each model keeps its own initialisation (keyed by `index`)."""
    key = index if data_key is None else data_key
    ds_entry = registry.get("dataset", wl.dataset.name)
    # fresh generators from the key's seeds (the same draws for every workload sharing it)
    ctx = DatasetContext(N, streams.keyed("data", key), streams.keyed("partition", key, 1),
                         path=f"{path}.dataset", device_stream=lambda k: streams.keyed("data.device", key, k),
                         test_stream=streams.keyed("data.test_devices", key))
    data = ds_entry.factory(wl.dataset, ctx)
    if isinstance(data.client_indices, KeyedRows):
        refuse_keyed(data, path, eval_train, evaluation)
    part = wl.partition
    if part is None:
        from ..scenario.schema import member
        part = member("partition", "natural" if data.natural else "iid")
    data = partition_data(data, part, N, streams.keyed("partition", key), f"{path}.partition")
    local = None if evaluation is None else local_test_rows(data, part, evaluation, N, streams, key)
    sizes = data.client_sizes()
    if (sizes == 0).any():
        raise ScenarioError([(f"{path}.partition", f"{int((sizes == 0).sum())} clients got no samples; "
                              "use fewer clients or a less skewed partition")])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(streams.int_seed("init", index))
        module = registry.get("model", wl.model.name).factory(
            wl.model, ModelContext(data.input_shape, data.num_classes, data.extra, path=f"{path}.model"))
    try:
        net = FlatModel(module, device, dtype)
    except ValueError as e:
        raise ScenarioError([(f"{path}.model.name", str(e))])
    batch = None if wl.batch_size == "full" else int(wl.batch_size)
    if data.task == "quadratic":
        evaluate = QuadraticEval(data.extra)
    else:
        evaluate = ClassificationEval(net, torch.as_tensor(data.x_test, device=device, dtype=dtype),
                                      torch.as_tensor(data.y_test, device=device))
        if eval_train:              # the global model on every training sample (FedSUM's training loss)
            evaluate = TrainAndTestEval(evaluate, ClassificationEval(
                net, torch.as_tensor(data.x_train, device=device, dtype=dtype),
                torch.as_tensor(data.y_train, device=device)))
    algo_cls = registry.get("algorithm", algo_spec.name).factory
    algo = algo_cls(algo_spec, AlgoContext(task=index, dim=net.dim, num_clients=N, client_sizes=sizes,
                                           x0=net.initial_vector(), rng=streams.generator("algorithm", index),
                                           streams=streams))
    task = Task(index, data, net, algo, batch, evaluate, sizes, path, net.initial_buffers(), local)
    task.checked = CheckedAlgorithm(task, algo_spec.name)
    return task


def refuse_keyed(data, path: str, eval_train: bool, evaluation) -> None:
    """What a keyed data set (workloads/keyed.py) cannot do: every device's rows at once."""
    why = (f"{path}.dataset.generation: keyed generation makes a device's rows when it first trains; "
           "{what} needs every device's rows (use generation: sequential)")
    if eval_train:
        raise ScenarioError([("run.eval_train", why.format(what="the training loss over all rows"))])
    if evaluation is not None:
        raise ScenarioError([("evaluation", why.format(what="per-client evaluation"))])


def local_test_rows(data, partition, spec, N, streams, key) -> LocalRows:
    """Each client's local test rows (`evaluation.rows`, docs/fairness.md), drawn from streams
    keyed by the workload's data key; `holdout` removes them from the clients' training rows."""
    if data.task != "classification":
        raise ScenarioError([("evaluation", f"per-client evaluation measures classification accuracy; "
                                            f"{data.name} is a {data.task} task (remove the evaluation block)")])
    if spec.rows == "test":
        return split_test(data, partition, N, streams.keyed("evaluation.split", key))
    train, local = hold_out(data.client_indices, spec.holdout, streams.keyed("evaluation.holdout", key))
    data.client_indices = IndexRows(train)
    return local


class _GroupRngs:
    """Random streams of one device group's availability model: the group's stream for a
    round (vectorised per-round draws) and each client's own long-lived stream."""

    def __init__(self, streams, group: int):
        self.streams, self.group = streams, group

    def round(self, r: int):
        return self.streams.keyed("availability.round", self.group, r)

    def client(self, c: int):
        return self.streams.generator("availability.client", c)


class World:
    def __init__(self, sc, progress: Optional[Callable] = None, cpus: Optional[int] = None):
        self.sc = sc
        self.env = simpy.Environment()
        self.streams = Streams(sc.seed)
        self.progress = progress
        ex = sc.executor
        self.device = pick_device(ex.device)
        self.dtype = torch.float64 if ex.dtype == "float64" else torch.float32
        # the cores this run may use (a sweep's share, else torch's count: OMP_NUM_THREADS or the
        # machine's), read before the run's own `executor.threads` is set (compute/threads.py)
        self.cpus = int(cpus) if cpus is not None else torch.get_num_threads()
        torch.set_num_threads(ex.threads)
        N = sc.clients.count
        self.num_clients = N
        multi = sc.workloads is not None
        from ..scenario.schema import algorithm_for
        wls = sc.workload_list
        same = [next(j for j in range(i + 1) if (wls[j].dataset, wls[j].partition) == (wl.dataset, wl.partition))
                for i, wl in enumerate(wls)]
        self.tasks = [build_task(i, wl, f"workloads[{i}]" if multi else "workload", N, self.streams,
                                 self.device, self.dtype, algorithm_for(sc, i), sc.run.eval_train, same[i],
                                 sc.evaluation)
                      for i, wl in enumerate(wls)]
        self.clients = self._build_clients()
        self.executor = self._build_executor()
        self.network = NetworkSim(self.env, sc.network, self.clients, self.groups, self.streams)
        proto = registry.get("protocol", sc.protocol.name)
        self.recorder = Recorder(N, participants_only=sc.output.clients_csv == "participants",
                                 events=sc.output.events, multi_model=multi,
                                 per_job=proto.factory.records_per_job, timeline=bool(sc.run.timeline))
        self.group_of = self.network.group_of          # each client's device group (ids are contiguous per group)
        # a group whose fraction rounds to no client has no one to be online
        self.group_members = [(m.members, m) for m in self.availabilities if len(m.members)]
        self.time_availability = any(m.kind == "time" for _, m in self.group_members)
        self._check_flops()
        self.protocol = proto.factory(self, sc.protocol)
        self.client_eval = None if sc.evaluation is None else ClientEvaluation(self, sc.evaluation)
        self.wall0 = None
        self.rounds_done = 0
        self.next_eval_k = 1     # next evaluation at next_eval_k x run.eval_every_seconds
        self.last_good = {}
        for t in self.tasks:
            self.keep_last_good(t)
        self.status, self.message = "running", None
        self.error = None               # the ContractError that stopped a `failed` run
        self._still_at, self._still = -math.inf, 0      # should_stop: aggregations without time passing

    # -- construction -----------------------------------------------------------------
    def _build_clients(self) -> Fleet:
        """One compute / link / availability object per device group, shared by its clients
        (per-client state lives inside the models, keyed by client id); the clients themselves
        are a `Fleet`: a `Client` is made when first touched (sim/fleet.py)."""
        from ..scenario.fleet import GroupContext
        from ..workloads.models import forward_macs

        sc = self.sc
        base = None
        groups, self.groups, self.availabilities = [], [], []
        sizes = group_sizes(sc.clients)
        d0 = self.tasks[0].data
        labels = d0.label_histograms() if d0.task == "classification" and not d0.keyed else None
        macs = [forward_macs(t.net.module, t.data.input_shape) if t.data.task == "classification" else 0
                for t in self.tasks]
        start = 0
        for gi, (g, n) in enumerate(zip(sc.clients.groups, sizes)):
            members = np.arange(start, start + n)
            start += n
            ctx = GroupContext(members=members, labels=None if labels is None else labels[members], base_dir=base)
            block = "compute"             # the block whose model refused: named in the error
            try:
                compute = registry.get("compute", g.compute.model).factory(g.compute, ctx)
                block = "network"
                link = registry.get("network", g.network.model).factory(g.network, ctx)
                block = "availability"
                avail = registry.get("availability", g.availability.model).factory(g.availability, ctx)
                avail.bind(members, _GroupRngs(self.streams, gi), ctx.labels)
            except ValueError as e:
                why = str(e) + (" (keyed generation makes no label histograms at set-up: use "
                                "workload.dataset.generation: sequential)" if labels is None and d0.keyed else "")
                raise ScenarioError([(f"clients.groups[{gi}].{block}", why)])
            self.groups.append(g)
            self.availabilities.append(avail)
            groups.append((g, compute, link, avail))
        return Fleet(self.streams, groups, sizes, [t.client_sizes for t in self.tasks],
                     [t.batch_size for t in self.tasks], macs)

    def _build_executor(self):
        tasks = {}
        for t in self.tasks:
            if t.data.keyed:             # the pool of generated rows, grown in place (workloads/keyed.py)
                t.data.client_indices.bind(self.device, self.dtype)
                x, y = t.data.client_indices.x, t.data.client_indices.y
            else:
                x = torch.as_tensor(t.data.x_train, device=self.device, dtype=self.dtype)
                y = torch.as_tensor(t.data.y_train, device=self.device)
            tasks[t.index] = TaskData(t.net, x, y, ClientRows(t.data.client_indices, self.device))
        cls = registry.get("executor", self.sc.executor.name).factory
        return cls(tasks, self.streams, self.device, self.sc.executor, cpus=self.cpus)

    # -- running --------------------------------------------------------------------
    #: aggregations in a row at one virtual time after which a run with only a virtual-time
    #: budget stalls (every step and transfer instant: the budget would never be reached)
    STILL_LIMIT = 1000

    def should_stop(self) -> bool:
        r = self.sc.run
        if self.env.now > limits.MAX_SECONDS and self.status == "running":
            self.stall(f"virtual time {self.env.now:g} s passed {limits.MAX_SECONDS:g} s: beyond it float64 seconds "
                       f"no longer resolve the shortest durations ({limits.MIN_SECONDS:g} s); give fewer "
                       "run.rounds or shorter times")
        if r.rounds is None and self.status == "running":
            if self.env.now > self._still_at:
                self._still_at, self._still = self.env.now, 0
            else:
                self._still += 1
                if self._still >= self.STILL_LIMIT:
                    self.stall(f"{self._still} aggregations in a row at virtual time {self.env.now:g}: nothing "
                               "takes virtual time, so run.virtual_time is never reached (give run.rounds)")
        return self.status in ("stalled", "stopped") or (r.rounds is not None and self.rounds_done >= r.rounds) or \
            (r.virtual_time is not None and self.env.now >= r.virtual_time)

    def run(self) -> None:
        self.wall0 = time.perf_counter()
        for task in self.tasks:  # round 0: the initial model, at virtual time 0
            row = {"round": 0, "model": task.index, "virtual_time": self.env.now, "wall_time": 0.0,
                   "participants": 0, "selected": 0, "dropped": 0, "bytes_up": 0, "bytes_down": 0,
                   "train_loss": float("nan")}
            row.update(self.evaluate(task))
            row.update(self.evaluate_clients(task, 0))     # never charged: no round to hold
            self.recorder.metric(row)
            if self.progress is not None:
                self.progress(row)
        proc = self.env.process(self.protocol.process())
        until = proc
        if self.sc.run.virtual_time is not None:
            until = self.env.any_of([proc, self.env.timeout(self.sc.run.virtual_time)])
        # a large fleet's world (clients, data, models: millions of objects) lives as long as
        # the run: the cyclic garbage collector leaves it out of its full passes, which would
        # rescan all of it every few thousand allocations (after one collection, so that no
        # garbage of earlier runs in this process is frozen with it)
        freeze = self.num_clients >= FREEZE_FROM
        if freeze:
            gc.collect()
            gc.freeze()
        try:
            self.env.run(until=until)
            if self.status == "running":
                self.status = "complete"
        except DivergedError as e:
            self.status, self.message = "diverged", str(e)
        except ContractError as e:      # a component broke its contract (boundary/): the run stops here
            self.fail(e)
        except RuntimeError as e:       # SimPy: the event queue ran dry before the run ended
            if not str(e).startswith("No scheduled events left"):
                raise
            self.stall(f"nothing left to happen at virtual time {self.env.now:g}: every client waits on work "
                       "that never ends or on an aggregation that cannot come")
        finally:
            if freeze:
                gc.unfreeze()
        self.protocol.record_open()     # work the run's end cut short: what it finished is recorded

    def fail(self, e: ContractError) -> None:
        """A component broke its contract: stop the run (status `failed`), keeping what was
        recorded; the error gets the virtual time it happened at, and the round if it lacks one."""
        if e.virtual_time is None:
            e.virtual_time = float(self.env.now)
        if e.round is None:
            e.round = int(self.rounds_done) + 1
        self.status, self.message, self.error = "failed", str(e), e

    def stall(self, why: str) -> None:
        """The run cannot make progress: stop it (status `stalled`), keeping what was recorded."""
        self.status, self.message = "stalled", why

    def _check_flops(self):
        for gi, g in enumerate(self.groups):
            if g.compute.model == "flops":
                for t in self.tasks:
                    if t.data.task != "classification":
                        raise ScenarioError([(f"clients.groups[{gi}].compute.model",
                                              f"the flops model needs a neural network; {t.data.name} has no FLOPs count")])

    def wall(self) -> float:
        return time.perf_counter() - self.wall0

    def keep_last_good(self, task: Task) -> None:
        """The latest finite global model (and BatchNorm statistics): what model.npy saves."""
        b = None if task.buffers is None else task.buffers.detach().clone()
        self.last_good[task.index] = (task.algorithm.global_params().detach().clone(), b)

    def evaluate(self, task: Task) -> dict:
        return task.evaluate(task.algorithm.global_params(), task.buffers)

    def evaluate_clients(self, task: Task, round_: int, log=None) -> dict:
        """Per-client evaluation with the global one (`evaluation:`; none: no columns); `log`:
        the round's log, where a charged evaluation records each client's `eval_time`."""
        return {} if self.client_eval is None else self.client_eval.run(task, round_, log)

    def client_state_summary(self) -> dict:
        """Per-client algorithm state (algorithms/state.py, docs/client-state.md): bytes held
        now and at peak, what a dense [N, d] store would hold, per kind, rows written per kind."""
        out = {"client_state_bytes": 0, "client_state_peak_bytes": 0, "client_state_dense_bytes": 0,
               "client_state_kinds": {}, "client_state_rows": {}}
        for t in self.tasks:
            st = t.algorithm.ctx.states
            s = st.summary()
            out["client_state_bytes"] += s["client_state_bytes"]
            out["client_state_peak_bytes"] += st.peak_bytes
            out["client_state_dense_bytes"] += s["client_state_dense_bytes"]
            for part in ("client_state_kinds", "client_state_rows"):
                for k, v in s[part].items():
                    out[part][k if len(self.tasks) == 1 else f"{t.index}:{k}"] = v
        return out

    def check_finite(self, task: Task, round_: int, train_loss: float) -> None:
        w = task.algorithm.global_params()
        bad = not bool(torch.isfinite(w).all())
        if bad or (train_loss is not None and not math.isfinite(train_loss)):
            what = "the global model has non-finite parameters" if bad else f"the training loss is {train_loss}"
            raise DivergedError(f"diverged at round {round_}: {what} (lower algorithm.lr?)")
