"""The progress bar of judging: no rate or time left until the first batch is done, then the rate since.

A judge's first batch compiles its program (tens of seconds on CPU) before it judges anything;
tqdm's estimate after that batch takes the compile time as the judging rate, so a 6-minute job
first showed "5:55:11" left, and its exponential smoothing took dozens of batches to forget it.
:class:`ProgressBar` shows ``?`` as the rate and the time left until the first batch has completed,
then the mean rate over the batches since (the first left out), so its first estimate is the
steady-state one.
"""

from __future__ import annotations

from tqdm.auto import tqdm

__all__ = ["ProgressBar", "progress_bar"]


class ProgressBar(tqdm):
    """A tqdm bar (terminal or notebook) whose rate and time left leave out its first update.

    The rate shown is ``(n - n_1) / (t - t_1)``, where ``(t_1, n_1)`` is the clock and the count when
    the first update (the first batch, with its compilation) completed; before the second update it
    shows ``?``. Elapsed time still counts from the start.
    """

    def __init__(self, *args, **kwargs):
        self._first_done: tuple[float, float] | None = None     # (time, n) when the first update completed
        super().__init__(*args, **kwargs)

    def update(self, n=1):
        if self._first_done is None and n:
            self._first_done = (self._time(), self.n + n)
        return super().update(n)

    @property
    def format_dict(self):
        d = super().format_dict
        first = getattr(self, "_first_done", None)
        if first is None or d["n"] <= first[1]:
            d["rate"] = None
            d["initial"] = d["n"]       # tqdm's fallback rate (n - initial) / elapsed is then 0: shown as "?"
        else:
            dt = self._time() - first[0]
            d["rate"] = (d["n"] - first[1]) / dt if dt > 0 else None
            if d["rate"] is None:
                d["initial"] = d["n"]
        return d


def progress_bar(total: int, desc: str, *, unit: str = "cmp", **kwargs) -> ProgressBar:
    """A :class:`ProgressBar` over ``total`` comparisons (the bar of ``judge_contexts``, the active loop and
    ``jaxrank zepo``)."""
    return ProgressBar(total=total, desc=desc, unit=unit, **kwargs)
