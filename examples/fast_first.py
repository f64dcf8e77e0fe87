"""A selector of your own (docs/selection.md): each round, the k available clients expected
to finish first.

A client's expected round time is the mean of the round times it has shown (the history the
engine keeps because this selector declares `observes`), else its a-priori profile from the
device models; times within a millisecond count as equal. Ties go to the client that has
waited longest since it was last selected, then to the lower id, so equally fast clients
take turns."""
import numpy as np

from emulator.api import KOrFraction, Selector, register


class FastFirstParams(KOrFraction):
    """k (or fraction): clients per round."""


class FastFirst(Selector):
    name = "fast_first"
    observes = True                      # the engine keeps the history and calls observe

    def select(self, ctx):
        ids = np.asarray(ctx.available)
        seen = ctx.history.mean_total(ids)                       # NaN: never observed
        expected = np.round(np.where(np.isnan(seen), ctx.profile(ids).total, seen), 3)
        last = ctx.history.get("round", ids)                     # 0: never selected
        order = np.lexsort((ids, last, expected))                # fastest, then longest waiting, then id
        return ids[order[:ctx.count()]].tolist()


register("selection", "fast_first", FastFirstParams,
         "the k available clients with the shortest expected round (observed, else profiled)",
         lambda p, ctx=None: FastFirst())
