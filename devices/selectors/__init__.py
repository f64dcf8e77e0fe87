"""Server-side selection (docs/selection.md): which of the available clients the server asks
to train. `base` declares the selector API; `static` holds the selectors without memory;
`oort`, `tifl`, `fedcs` and `power_of_choice` learn from what the fleet has shown
(`history`, kept in `columns` grown on first write); `sampling` draws weighted samples
without replacement."""
from .base import Chosen, Profile, RoundOutcomes, SelectionContext, Selector, Status, count_of
from .columns import ClientColumns
from .fedcs import FedCSSelector
from .history import History
from .oort import OortSelector
from .power_of_choice import PowerOfChoiceSelector
from .sampling import Uniforms, wswor
from .static import (AllSelection, BiasedSelection, CyclicSelection, ReshuffledCyclicSelection, SequenceSelection,
                     UniformSelection)
from .tifl import TiflSelector

__all__ = ["Chosen", "Profile", "RoundOutcomes", "SelectionContext", "Selector", "Status", "count_of",
           "ClientColumns", "History", "Uniforms", "wswor", "AllSelection", "BiasedSelection", "CyclicSelection",
           "ReshuffledCyclicSelection", "SequenceSelection", "UniformSelection", "OortSelector", "TiflSelector",
           "FedCSSelector", "PowerOfChoiceSelector"]
