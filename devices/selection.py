"""Server-side selection: the selectors and their API, gathered in `devices.selectors`
(docs/selection.md); this module keeps the names importable from here."""
from .selectors import *  # noqa: F401,F403
from .selectors import __all__  # noqa: F401
