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

Two cores (`predict(a, fork=True)`, a large trace on an idle machine: PARALLEL_REPLAY_WORK): a forked child
(trace/child.py) replays the applicable edits from the last while this process runs the rules, and
replay_edits takes each edit from the child where it has arrived, waits for the one the child is replaying when it
gets there (the child began it earlier), and replays the others here, from the first. The two run the same code on the same calibrated graph, so the predictions are the same whoever replays them.
"""

from __future__ import annotations

import functools

import msgspec

from gpucheckup.analysis import replay, whatif
from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.diagnosis.fixes import CATALOGUE
from gpucheckup.trace import parallel

NO_EDIT = "not replayed: no graph edit models this fix"
NOT_REPLAYED = "not replayed: no replayed trace (see the notes)"  # an edit exists, but nothing was replayed
# Replay the edits on two cores from this many (graph nodes + GPU ops) x edits: ~30 ms of replays on the 2-core
# machine of docs/performance.md, ten times what the fork costs (~3 ms for a 100 MB process). launch_bound_stacks
# (21.8k nodes and ops, 6 edits: 131k) forks; the 1 MB compute_bound (9.1k, 3 edits: 27k) does not.
PARALLEL_REPLAY_WORK = 60_000
IDLE_CORES = 1.5  # fork only where this many processors are idle now (as trace/reader.py's split read)
# An edit the child is replaying when this process reaches it is waited for (it began earlier), up to this long;
# a child that sends nothing by then (it never should: one edit's replay takes well under a second at 16x) is
# left, and the edit replayed here.
CHILD_EDIT_WAIT_S = 30.0


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
    helper: object | None = None  # trace/child.Child replaying the wanted edits from the last, or None

    def replay_edits(self, keys: set[str]) -> None:
        """Replay the graph edits of the wanted fixes whose key is in `keys` (each edit once, catalogue order)
        into by_key; a failure leaves no prediction and says why in `note`, as predict() does."""
        if self.pending is None:
            return
        g, before, step, wanted = self.pending
        self.pending, helper, self.helper = None, self.helper, None
        done: dict[tuple, whatif.Prediction] = {}
        try:
            for e in wanted:
                if e.key not in keys:
                    continue
                k = (e.replay, e.replay_params)
                if helper is not None:
                    done.update(helper.arrived())
                    if k not in done and k == _replaying(wanted, done):  # the child is on it: sooner than here
                        done.update(helper.arrived(wait=CHILD_EDIT_WAIT_S))
                if k not in done:
                    done[k] = whatif.predict(g, e.replay, before, **dict(e.replay_params))
                p = done[k]
                pct = max(p.saving_pct, 0.0)  # negative: replay noise, or padding that costs more (no saving)
                self.by_key[e.key] = FixPrediction(e.replay, p.transform, step - pct * step / 100, pct * step / 100,
                                                   pct)
        except REPLAY_ERRORS as err:
            self.by_key.clear()
            self.note = _not_replayable(err)
        finally:
            if helper is not None:
                helper.close()


def _replaying(wanted: list, done: dict) -> tuple | None:
    """The edit the child replays now: it goes from the last, so the last one that has not arrived."""
    return next((k for k in reversed(_edits(wanted)) if k not in done), None)


def _edits(wanted: list) -> list[tuple]:
    """The distinct graph edits (edit, parameters) of the wanted catalogue entries, in catalogue order."""
    return list(dict.fromkeys((e.replay, e.replay_params) for e in wanted))


def predict(a: TraceAnalysis, fork: bool = False) -> Predictions:
    """Each applicable catalogue fix with a graph edit, replayed on the trace of `a` (`fork`: a large trace's edits
    on two cores, where this process is not itself one of several workers)."""
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
        helper = _replay_in_child(g, before, _edits(wanted)) if fork else None
        return Predictions(host_scale=cal.host_scale, pending=(g, before, a.window.step_ms, wanted), helper=helper)
    except REPLAY_ERRORS as err:
        return Predictions(note=_not_replayable(err))


def _replay_in_child(g: replay.Graph, before: float, edits: list[tuple]):
    """A forked child replaying `edits` from the last, each result sent as it comes; None where it does not pay
    (a small graph, one edit, one core or a busy machine) or cannot start."""
    if ((len(g.h_kind) + len(g.g_dur)) * len(edits) < PARALLEL_REPLAY_WORK or len(edits) < 2
            or parallel.cores() < 2 or parallel.idle_cores() < IDLE_CORES):
        return None
    from gpucheckup.trace import child  # the fork and the pipe: only for a large trace

    return child.start(functools.partial(_replayed_each, g, before, edits[::-1]), each=True)


def _replayed_each(g: replay.Graph, before: float, edits: list[tuple]):
    """In the child: (edit, its whatif.Prediction) for each edit in turn."""
    for name, params in edits:
        yield (name, params), whatif.predict(g, name, before, **dict(params))


REPLAY_ERRORS = (ValueError, IndexError, KeyError, ZeroDivisionError, FloatingPointError)


def _not_replayable(err: Exception) -> str:
    return f"no replay: the trace's dependency graph could not be replayed ({type(err).__name__}: {err})"
