"""Importing this module registers every built-in component (registry.load_all)."""
from .scenario import fleet  # noqa: F401  devices: compute, availability, network, selection
from .algorithms import fedasync, fedavg, fedprox, tsfl  # noqa: F401
from .algorithms import fedau, fedavg_active, fedawe, fedsum, scaffold, stored_updates  # noqa: F401
from .algorithms import dp_fedavg, dp_sgd  # noqa: F401
from .compute import batched, executor  # noqa: F401
from .sim.protocols import asynchronous, intervals, multi_model, rounds  # noqa: F401
from .workloads import datasets, models, partitions  # noqa: F401
from .algorithms import fedumf  # noqa: F401
from .runs import callbacks  # noqa: F401  run callbacks: mlflow, tensorboard
from .codecs import builtins as _codecs  # noqa: F401  message codecs (docs/algorithms/compression.md)
from .codecs import powersgd as _powersgd  # noqa: F401  PowerSGD's two-phase exchange (compression.md 2.6)
