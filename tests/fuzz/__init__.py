"""Property-based scenarios (issue 16): a hypothesis generator of valid flemu scenarios drawn
from the registry's parameter models, the checks every run must pass, and malformed variants.

- `params.py`     a component's parameters: hand-tuned strategies (fast runs, values that
                  make sense together) for every registered component, and a generic one built
                  from the pydantic model for components registered later;
- `scenarios.py`  whole scenarios (fleet, protocol, algorithm, workloads, run, executor,
                  network) and the small trace / data files some components need;
- `checks.py`     what must hold in a run directory, read back from its files (independently
                  of the recorder that wrote them), and comparisons of two run directories;
- `malformed.py`  a valid scenario with exactly one field broken, and where the error must point;
- `hostile.py`    what a careless or hostile user types (issue 28): non-finite and extreme numbers
                  in every time-model field, broken trace files and paths, hostile names, broken
                  .npz arrays and FedScale pickles, each with what its one error must name;
- `profiles.py`   hypothesis settings: `ci` (the default, a few examples in `make test`) and
                  `fuzz` (`make fuzz`: thousands, with the example database so a failure replays).
"""
