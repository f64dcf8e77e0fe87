"""The boundary around user code (docs/reliability.md, "Statuses and contracts").

Every value a component hands back to the engine is checked where it crosses, in the round it
happens, by one function per crossing; built-in components go through the same checks as a
plugin's. A violation is a `ContractError` (emulator/errors.py) naming the component (its
kind, registered name, class and file), the method, the round, what was wrong and what the
contract is; the world stops the run there (status `failed`, exit status 2) and the run
directory keeps what was recorded.

- `algorithm.py`: an algorithm's broadcast, LocalSpec (local_spec, cohort_spec,
  background_spec), Upload, uploaded vectors and Aggregation (weights finite, non-negative and
  summing to `weights_total`);
- `selection.py`: a selector's choice (distinct available ids, positive finite weights);
- `training.py`: a local rule's pieces (a loss term's scalar, a transform's gradient) and a
  train function's loss and batches;
- `codec.py`: a codec's bytes (a positive integer) and decoded values (its input's shape and dtype, finite
  where the input is);
- `devices.py`: a device model's seconds (step clocks, transfers, availability times) and
  online masks.

What is not a contract violation: a non-finite model or training loss is divergence (the
scenario's learning rate, exit status 3), checked after each aggregation (sim/world.py).
"""
from .component import describe, describe_class  # noqa: F401
