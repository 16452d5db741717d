"""What each fix is predicted to save: its catalogue entry's graph edit, replayed (whatif/edits.py).

Definitions (also in docs/metrics.md, "What-if"):
- The trace's graph is built and calibrated once (replay.calibrate: on the step without the
  profiler when it is known and the trace is at least 5% slower, else by the profiler's
  per-event cost); each graph edit (a fix's `replay` and `replay_params` in
  diagnosis/fixes.py) is replayed once, however many fixes share it.
- predicted saving % = 100 x (replayed step - replayed step with the edit) / replayed step;
  in the report's step time (analysis/one_trace/window.py): saving ms = % x step / 100, predicted step =
  step - saving ms. So every printed percent is its printed ms over the printed step.
- A fix whose catalogue entry names no graph edit has no prediction (NO_EDIT says so); a trace the
  replay cannot model has none at all, and `note` says why.
- A trace with no CUDA launch call (a light window recorded through CUPTI: the GPU's work only) is not replayed
  (NO_LAUNCH_CALLS): every edit acts on the host's chain of launches, which such a trace does not hold; replayed
  anyway, its host chain is empty, every launch-side edit saves nothing and an input edit could name the verdict
  (seen on a Lightning loop on the H200, docs/validation.md 6f). Its fixes are ranked by their bounds.
- A trace with launch calls but no operators (the torch.profiler light window) is replayed, and its predictions
  say they are coarse (COARSE): the edits that remove operator dispatch (torch_compile, cuda_graphs) find none, and
  the parameter count the compiled calls' wrappers cost comes from operators, so those savings read low (an H200
  launch-bound job: cuda_graphs 15.9% from such a trace against 46.2% from the full window's).
`predict(a)` is called once per trace, by the pipeline (pipeline.check_trace): it builds and calibrates the
graph; the edits are replayed by `Predictions.replay_edits(keys)`, which diagnose() calls once with the keys
its findings can offer, so no edit is replayed for a fix no report shows.
"""

from __future__ import annotations

import functools

import msgspec

from gpucheckup.whatif import replay, edits as whatif
from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.diagnosis.fixes import CATALOGUE
from gpucheckup.trace import parallel
from gpucheckup.trace.tables import CPU_OP

NO_EDIT = "not replayed: no graph edit models this fix"
NOT_REPLAYED = "not replayed: no replayed trace (see the notes)"  # an edit exists, but nothing was replayed
FORK_EVENTS = 100_000  # predict in a forked child from this many host and GPU events (see predict; docs/performance.md)
IDLE_CORES = 1.5  # and only where this many processors are idle now (as trace/reader.py's split read)
REPLAY_ERRORS = (ValueError, IndexError, KeyError, ZeroDivisionError, FloatingPointError)  # a graph it cannot model
# A replay this much slower than now (% of the step) is said in the fix's note: the change costs more than it saves
# (autocast's casts on a host-bound loop, padding to a static size); nearer 0 it is within the steps' noise
SLOWER_PCT = 5.0
CHILD_WAIT_S = 60.0  # how long the child may take (it never should: ~0.04 s at 215k events) before it is given up on
NO_LAUNCH_CALLS = ("not replayed: the trace holds no CUDA launch call (a light window recorded through CUPTI keeps "
                   "the GPU's work only), and every edit acts on the host's launches; fixes are ranked by their bounds "
                   "(a full window, `gpucheckup run` without --light, replays them)")
COARSE = ("coarse: the trace records no operators (a light window), so the replay sees launch calls but no operator "
          "dispatch to remove (torch_compile and cuda_graphs read low)")


class FixPrediction(msgspec.Struct):
    """One fix's predicted step time and saving, in the report's step time, and the edit that made it."""

    transform: str  # the graph edit's name (whatif/edits.py)
    what: str  # what the edit changed, in one sentence
    step_ms: float  # predicted step time
    saving_ms: float  # per step
    saving_pct: float  # of the report's step time
    coarse: str = ""  # why this prediction is coarser than a full window's (COARSE) or capped (diagnosis CAPPED)
    upper_bound: bool = False  # the edit leaves a cost of the change out (said in `coarse`): it names no verdict


class Predictions(msgspec.Struct):
    """The applicable fixes' predictions by catalogue key (those replay_edits was asked for); `note` says why
    there are none when so."""

    by_key: dict[str, FixPrediction] = msgspec.field(default_factory=dict)
    note: str = ""
    host_scale: float = 1.0  # the profiler-overhead calibration applied to host time (replay.calibrate)
    pending: tuple | None = None  # (calibrated graph, its replayed step, the report's step, wanted (entry, params))
    helper: object | None = None  # trace/child.Child computing _calibrated_and_replayed, or None
    analysis: TraceAnalysis | None = None  # with a helper: the analysis to predict from here if it fails
    coarse: str = ""  # COARSE where the trace has no operators: said by every prediction (its predicted_note)

    def replay_edits(self, keys: set[str]) -> None:
        """Replay the graph edits of the wanted fixes whose key is in `keys` (each edit once, catalogue order)
        into by_key; a failure leaves no prediction and says why in `note`, as predict() does. With a helper,
        its edits are taken instead (the same code on the same graph); without its result, they are made here."""
        outcomes = None
        if self.helper is not None:
            helper, self.helper = self.helper, None
            got = helper.result(CHILD_WAIT_S)
            if got is None:  # the child failed or was killed: predict here
                fresh = _calibrated(self.analysis, self.pending[3])
                self.note, self.host_scale, self.pending = fresh.note, fresh.host_scale, fresh.pending
                self.coarse = fresh.coarse
            else:
                self.note, self.host_scale, outcomes = got
                if outcomes is None:
                    self.pending = None
        if self.pending is None:
            return
        g, before, step, wanted = self.pending
        self.pending = None
        done: dict[tuple, whatif.Prediction | str] = dict(outcomes or {})
        for e, params in wanted:
            if e.key not in keys:
                continue
            k = (e.replay, params)
            if k not in done:
                done[k] = _edit_outcome(g, before, k)
            p = done[k]
            if isinstance(p, str):  # the edit could not be replayed: no prediction at all, and why
                self.by_key.clear()
                self.note = p
                return
            pct = max(p.saving_pct, 0.0)  # negative: replay noise, or a change that costs more (no saving)
            slower = f"replayed {-p.saving_pct:.1f}% slower than now: no saving" if p.saving_pct <= -SLOWER_PCT else ""
            coarse = "; ".join(x for x in (self.coarse, p.unmodelled, slower) if x)
            self.by_key[e.key] = FixPrediction(e.replay.__name__, p.transform, step - pct * step / 100,
                                               pct * step / 100, pct, coarse, bool(p.unmodelled))


def predict(a: TraceAnalysis, fork: bool = False) -> Predictions:
    """Each applicable catalogue fix with a graph edit, replayed on the trace of `a` (`fork`: a large trace's graph
    built, calibrated and edited in a forked child while this process runs the rules, where this process is not
    itself one of several workers)."""
    wanted = [(e, e.params(a)) for e in CATALOGUE if e.replay and e.applies(a)]
    if not wanted:
        return Predictions()
    if len(a.trace.gpu) == 0:
        return Predictions(note="no replay: the trace has no GPU work")
    if not (a.launch_rows >= 0).any():
        return Predictions(note=NO_LAUNCH_CALLS)
    if fork and _forks(a):
        from gpucheckup.trace import child  # the fork and the pipe: only for a large trace

        helper = child.start(functools.partial(_calibrated_and_replayed, a, wanted))
        if helper is not None:
            return Predictions(pending=(None, None, a.window.step_ms, wanted), helper=helper, analysis=a,
                               coarse="" if _has_operators(a) else COARSE)
    return _calibrated(a, wanted)


def _forks(a: TraceAnalysis) -> bool:
    """Whether predicting in a child pays: a large trace, and a second core idle now."""
    return (len(a.trace.host) + len(a.trace.gpu) >= FORK_EVENTS and parallel.cores() >= 2
            and parallel.idle_cores() >= IDLE_CORES)


def _calibrated(a: TraceAnalysis, wanted: list) -> Predictions:
    """The trace's graph, built and calibrated, ready for replay_edits (or why there is none, in `note`)."""
    try:
        g = replay.build(a.trace, a.steps, a.launch_rows)
        unprofiled = a.profiler.unprofiled_step_ms if a.profiler else None
        cal = replay.calibrate(g, unprofiled)
        before = cal.replayed_ms  # the replay of g as calibrated
        if not before > 0:
            return Predictions(note="no replay: the replayed step has no length")
        return Predictions(host_scale=cal.host_scale, pending=(g, before, a.window.step_ms, wanted),
                           coarse="" if _has_operators(a) else COARSE)
    except REPLAY_ERRORS as err:
        return Predictions(note=_not_replayable(err))


def _has_operators(a: TraceAnalysis) -> bool:
    """Whether the trace records operators (a light window does not)."""
    return bool((a.trace.host.cat == CPU_OP).any())


def _calibrated_and_replayed(a: TraceAnalysis, wanted: list) -> tuple:
    """In the child: (note, host scale, each distinct edit's whatif.Prediction or why it could not be replayed),
    the outcomes None when no graph could be calibrated."""
    p = _calibrated(a, wanted)
    if p.pending is None:
        return p.note, p.host_scale, None
    g, before, _, _ = p.pending
    return p.note, p.host_scale, {k: _edit_outcome(g, before, k)
                                  for k in dict.fromkeys((e.replay, params) for e, params in wanted)}


def _edit_outcome(g: replay.Graph, before: float, edit: tuple) -> whatif.Prediction | str:
    """One graph edit (its function, params) replayed on g: its prediction, or why it could not be replayed."""
    try:
        return whatif.predict(g, edit[0], before, **dict(edit[1]))
    except REPLAY_ERRORS as err:
        return _not_replayable(err)


def _not_replayable(err: Exception) -> str:
    """The note for a graph that could not be built, calibrated or edited."""
    return f"no replay: the trace's dependency graph could not be replayed ({type(err).__name__}: {err})"
