"""What each fix is predicted to save: its catalogue entry's graph edit, replayed (analysis/whatif.py).

Definitions (also in docs/metrics.md, "What-if"):
- The trace's graph is built and calibrated once (replay.calibrate: on the step without the
  profiler when it is known and the trace is at least 5% slower, else by the profiler's
  per-event cost); each graph edit (a fix's `replay` and `replay_params` in
  diagnosis/fixes.py) is replayed once, however many fixes share it.
- predicted saving % = 100 x (replayed step - replayed step with the edit) / replayed step;
  in the report's step time (analysis/window.py): saving ms = % x step / 100, predicted step =
  step - saving ms. So every printed percent is its printed ms over the printed step.
- A fix whose catalogue entry names no graph edit has no prediction (NO_EDIT says so); a trace the
  replay cannot model has none at all, and `note` says why.
`predict(a)` is called once per trace, by the pipeline (pipeline.check_trace): it builds and calibrates the
graph; the edits are replayed by `Predictions.replay_edits(keys)`, which diagnose() calls once with the keys
its findings can offer, so no edit is replayed for a fix no report shows.
"""

from __future__ import annotations

import msgspec

from gpucheckup.analysis import replay, whatif
from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.diagnosis.fixes import CATALOGUE

NO_EDIT = "not replayed: no graph edit models this fix"
NOT_REPLAYED = "not replayed: no replayed trace (see the notes)"  # an edit exists, but nothing was replayed


class FixPrediction(msgspec.Struct):
    """One fix's predicted step time and saving, in the report's step time, and the edit that made it."""

    transform: str  # the analysis/whatif.py TRANSFORMS key
    what: str  # what the edit changed, in one sentence
    step_ms: float  # predicted step time
    saving_ms: float  # per step
    saving_pct: float  # of the report's step time


class Predictions(msgspec.Struct):
    """The applicable fixes' predictions by catalogue key (those replay_edits was asked for); `note` says why
    there are none when so."""

    by_key: dict[str, FixPrediction] = msgspec.field(default_factory=dict)
    note: str = ""
    host_scale: float = 1.0  # the profiler-overhead calibration applied to host time (replay.calibrate)
    pending: tuple | None = None  # (calibrated graph, its replayed step, the report's step, wanted entries)

    def replay_edits(self, keys: set[str]) -> None:
        """Replay the graph edits of the wanted fixes whose key is in `keys` (each edit once, catalogue order)
        into by_key; a failure leaves no prediction and says why in `note`, as predict() does."""
        if self.pending is None:
            return
        g, before, step, wanted = self.pending
        self.pending = None
        done: dict[tuple, whatif.Prediction] = {}
        try:
            for e in wanted:
                if e.key not in keys:
                    continue
                k = (e.replay, e.replay_params)
                if k not in done:
                    done[k] = whatif.predict(g, e.replay, before, **dict(e.replay_params))
                p = done[k]
                pct = max(p.saving_pct, 0.0)  # negative: replay noise, or padding that costs more (no saving)
                self.by_key[e.key] = FixPrediction(e.replay, p.transform, step - pct * step / 100, pct * step / 100,
                                                   pct)
        except REPLAY_ERRORS as err:
            self.by_key.clear()
            self.note = _not_replayable(err)


def predict(a: TraceAnalysis) -> Predictions:
    """Each applicable catalogue fix with a graph edit, replayed on the trace of `a`."""
    wanted = [e for e in CATALOGUE if e.replay and e.applies(a)]
    if not wanted:
        return Predictions()
    if len(a.trace.gpu) == 0:
        return Predictions(note="no replay: the trace has no GPU work")
    try:
        g = replay.build(a.trace, a.steps, a.launch_rows)
        unprofiled = a.profiler.unprofiled_step_ms if a.profiler else None
        cal = replay.calibrate(g, unprofiled)
        before = cal.replayed_ms  # the replay of g as calibrated
        if not before > 0:
            return Predictions(note="no replay: the replayed step has no length")
        return Predictions(host_scale=cal.host_scale, pending=(g, before, a.window.step_ms, wanted))
    except REPLAY_ERRORS as err:
        return Predictions(note=_not_replayable(err))


REPLAY_ERRORS = (ValueError, IndexError, KeyError, ZeroDivisionError, FloatingPointError)


def _not_replayable(err: Exception) -> str:
    return f"no replay: the trace's dependency graph could not be replayed ({type(err).__name__}: {err})"
