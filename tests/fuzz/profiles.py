"""Hypothesis settings profiles, chosen with HYPOTHESIS_PROFILE (default `ci`).

- `ci` (`make test`): a few examples per property, derandomized (the same examples every
  time: the suite stays deterministic; exploring is `make fuzz`'s job), no example database.
- `fuzz` (`make fuzz`): FUZZ_EXAMPLES examples per property (default 1000), random, with the
  example database in FUZZ_DB (default .hypothesis/fuzz): a failure found once is replayed
  first on the next run until it is fixed.

Examples per property under `ci` are set on each test (`examples(n)`), so that the suite's time
is decided where the cost of one example is known.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")

settings.register_profile(                  # no shrinking under ci: a failure prints its example
    "ci", deadline=None, derandomize=True, database=None, print_blob=True,     # and the blob at once
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
settings.register_profile(
    "fuzz", deadline=None, print_blob=True, max_examples=int(os.environ.get("FUZZ_EXAMPLES", "1000")),
    database=DirectoryBasedExampleDatabase(os.environ.get("FUZZ_DB", ".hypothesis/fuzz")),
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
settings.load_profile(PROFILE)


def examples(ci: int, fuzz_share: float = 1.0) -> settings:
    """`ci` examples under the ci profile; under fuzz, the profile's count times `fuzz_share`."""
    if PROFILE == "ci":
        return settings(max_examples=ci)
    return settings(max_examples=max(1, int(settings.default.max_examples * fuzz_share)))
