"""Mutation score of the core modules: how many one-token changes of the code the tests catch.

Tool: cosmic-ray (maintained, `pip install -e '.[mutation]'`). Its operators list every one-token change
of a module (a comparison, an arithmetic operator, a number +-1, True/False, and/or, a `not` added, a loop
that runs zero times, an exception type). We drive its Python API (operator positions, `mutate_and_test`)
instead of its sqlite work database so that each module runs against its own short list of tests, so that a
seeded random sample can be drawn (`--seed`, `--sample`), and so that the working tree is never mutated:
the repository (without .git and virtual environments) is copied to a temporary directory, PYTHONPATH
points at the copy's src/, and each mutant is applied there.

Operators left out: replacements by bitwise or shift operators and by `is`/`is not` (on floats and arrays
they raise at once, which inflates the score without testing anything), decorator removal (removes
@dataclass-like machinery, caught by import), and the variable replacer/inserter (random names). Mutants
inside type annotations are skipped: with `from __future__ import annotations` they are never evaluated.

Usage:
    nice -n 10 python bench/mutation.py                      # every module, a fresh random sample of 40
    nice -n 10 python bench/mutation.py verdict steps --sample 0   # every mutant of two modules
    nice -n 10 python bench/mutation.py timeline --seed 7 --sample 60

A mutant is killed when `pytest -x -q -p no:cacheprovider` over the module's tests fails or runs past
--timeout; it survives when they pass. The score is killed / (killed + survived). Every survivor is
printed with file:line and the changed line. docs/mutation.md keeps the figures and why each remaining
survivor is equivalent or harmless.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PKG = "src/gpucheckup"

# The one table to edit when a module moves or gains tests: short name -> (module under src/gpucheckup, the fast
# tests that exercise it: tests/test_<name>.py, the pinning ones first so that most mutants fail in a second or two;
# no test that drives a browser: under load its start-up can time out, which would count as a kill).
TABLE = {
    "verdict": ("diagnosis/verdict.py", "pin_verdict rule_table whatif_reports verdicts"),
    "rules": ("diagnosis/rules.py", "pin_rules rule_table synthetic_rules more_cases verdicts"),
    "fixes": ("diagnosis/fixes.py", "pin_fixes pin_cpu_rules fixes rule_table whatif_reports"),
    "timeline": ("analysis/one_trace/timeline.py", "pin_timeline synthetic_rules more_cases verdicts"),
    "gap_causes": ("analysis/one_trace/host/gap_causes.py", "pin_gap_causes synthetic_rules more_cases verdicts"),
    "steps": ("analysis/one_trace/steps.py", "pin_steps synthetic_rules more_cases verdicts"),
    "window": ("analysis/one_trace/window.py", "pin_steps one_window"),
    "replay": ("whatif/replay.py", "pin_replay replay replay_events replay_fast replay_segments pin_whatif"),
    "whatif": ("whatif/edits.py", "pin_whatif replay_whatif compile_edit static_shapes whatif_reports"),
    "compiled": ("whatif/compiled.py", "pin_whatif replay_whatif compile_edit whatif_reports corpus"),
    "nodes": ("whatif/nodes.py", "pin_whatif replay_whatif compile_edit whatif_reports corpus"),
    "ranks": ("analysis/job/ranks.py", "pin_ranks ranks_h200x2 ranks"),
    "collectives": ("analysis/one_trace/gpu/collectives.py", "pin_collectives ranks_h200x2 ranks"),
    "cpu_rules": ("diagnosis/cpu_rules.py", "pin_cpu_rules cpu_fixes cpu_job_verdict"),
    "rank_rules": ("diagnosis/rank_rules.py", "pin_rank_rules pin_ranks ranks_h200x2 ranks"),
    "step_basis": ("analysis/step_basis.py", "pin_step_basis run_reports document profiler_overhead one_window"),
    "kernels": ("analysis/one_trace/gpu/kernels.py",
                "pin_kernels kernel_categories optimizer_closure pin_rules pin_fixes synthetic_rules more_cases"),
    "optimizer_spans": ("analysis/one_trace/host/optimizer_spans.py",
                        "pin_optimizer_spans optimizer_closure pin_whatif pin_fixes"),
    "dataloader": ("analysis/one_trace/host/dataloader.py", "pin_dataloader pin_fixes pin_whatif pin_rules verdicts"),
}
MODULES = {k: (path, [f"tests/test_{t}.py" for t in tests.split()]) for k, (path, tests) in TABLE.items()}

SKIP_OPERATORS = ("_BitOr", "_BitAnd", "_BitXor", "_LShift", "_RShift", "_Is", "_IsNot",
                  "RemoveDecorator", "VariableReplacer", "VariableInserter")
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv*", "venv", "__pycache__", "*.egg-info", ".pytest_cache",
                                     "mutants", ".hypothesis")


def operators():
    """The cosmic-ray operators used: (name, instance), leaving out SKIP_OPERATORS."""
    import cosmic_ray.plugins as plugins

    for name in sorted(plugins.operator_names()):
        if name.endswith(SKIP_OPERATORS) or "_Is_" in name or "_IsNot_" in name:
            continue
        cls = plugins.get_operator(name)
        if not cls.arguments():
            yield name, cls()


def annotation_spans(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) positions of every type annotation: with `from __future__ import annotations` they are
    strings never evaluated, so a mutant inside one is equivalent by construction."""
    spans = []
    for node in ast.walk(ast.parse(path.read_text())):
        ann = [getattr(node, "returns", None), getattr(node, "annotation", None)]
        spans += [((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset)) for a in ann if a is not None]
    return spans


def mutations(path: Path) -> list:
    """Every mutation of one module outside annotations, as cosmic-ray MutationSpecs (the positions its
    `init` would list; the occurrence numbers are cosmic-ray's own)."""
    from cosmic_ray.ast import ast_nodes, get_ast_from_path
    from cosmic_ray.work_item import MutationSpec

    tree = get_ast_from_path(path)
    nodes = list(ast_nodes(tree))
    skip = annotation_spans(path)
    specs = []
    for name, op in operators():
        positions = [(s, e) for node in nodes for s, e in op.mutation_positions(node)]
        for occurrence, (s, e) in enumerate(positions):
            # parso columns count from 0 like ast's, and its lines from 1
            if any(a <= s and e <= b for a, b in skip):
                continue
            specs.append(MutationSpec(module_path=str(path), operator_name=name, occurrence=occurrence,
                                      start_pos=s, end_pos=e))
    return specs


def changed_line(diff: str) -> str:
    """The mutated line from a unified diff: '-old' -> '+new'."""
    minus = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    plus = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    return f"{' / '.join(minus)}  ->  {' / '.join(plus)}"


def test_command(tests: list[str], timeout: float) -> str:
    """The pytest command each mutant runs: stop at the first failure, no cache, its temporary files inside the
    copy, a per-test timeout."""
    return (f"{sys.executable} -m pytest -x -q -p no:cacheprovider --basetemp=.pytest_tmp --timeout={int(timeout)} "
            f"{' '.join(tests)}")


def run_module(short: str, work: Path, rng: random.Random, sample: int, timeout: float) -> tuple[int, int, list]:
    """Mutate one module in the copy, run its tests per mutant; (killed, survived, survivors)."""
    from cosmic_ray.mutating import mutate_and_test
    from cosmic_ray.testing import run_tests
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    rel, tests = MODULES[short]
    path = work / PKG / rel
    tests = [t for t in tests if (work / t).exists()]
    cmd = test_command(tests, timeout)
    t0 = time.monotonic()
    outcome, out = run_tests(cmd, timeout * 4)
    base_s = time.monotonic() - t0
    if outcome != TestOutcome.SURVIVED:
        print(f"{short}: the tests fail without any mutation; skipped\n{out[-2000:]}", flush=True)
        return 0, 0, []
    specs = mutations(path)
    chosen = rng.sample(specs, min(sample, len(specs))) if sample > 0 else specs
    chosen.sort(key=lambda m: (m.start_pos, m.operator_name, m.occurrence))
    print(f"{short}: {PKG}/{rel}, {len(specs)} mutants, running {len(chosen)}; tests ({base_s:.0f} s): "
          f"{' '.join(tests)}", flush=True)
    killed, survived, survivors = 0, 0, []
    for m in chosen:
        res = mutate_and_test([m], cmd, max(timeout, 3 * base_s))
        if res.worker_outcome == WorkerOutcome.NO_TEST:
            continue
        if res.worker_outcome != WorkerOutcome.NORMAL:
            print(f"  {rel}:{m.start_pos[0]} {m.operator_name}: not run ({res.worker_outcome})", flush=True)
            continue
        if res.test_outcome == TestOutcome.SURVIVED:
            survived += 1
            line = f"{rel}:{m.start_pos[0]} {m.operator_name.split('/')[-1]}: {changed_line(res.diff or '')}"
            survivors.append(line)
            print(f"  SURVIVED {line}", flush=True)
        else:
            killed += 1
    total = killed + survived
    score = 100 * killed / total if total else float("nan")
    print(f"{short}: score {score:.0f}% ({killed} killed of {total})", flush=True)
    return killed, survived, survivors


def main(argv: list[str] | None = None) -> int:
    """Parse the options, copy the repository, run each module named (default: all)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("modules", nargs="*", help=f"short names, of: {' '.join(MODULES)} (default: all)")
    p.add_argument("--seed", type=int, default=None, help="random seed for the sample (default: a fresh one)")
    p.add_argument("--sample", type=int, default=40, help="mutants per module, 0 = all (default 40)")
    p.add_argument("--timeout", type=float, default=120, help="seconds per mutant's test run, at least")
    args = p.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        p.error(f"unknown module(s) {' '.join(unknown)}; known: {' '.join(MODULES)}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still removes its copy
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    print(f"seed {seed} (repeat with --seed {seed} --sample {args.sample})", flush=True)
    fixtures = REPO.parent / "shared" / "fixtures" / "h200"
    if "GPUCHECKUP_FIXTURES" not in os.environ and fixtures.is_dir():
        os.environ["GPUCHECKUP_FIXTURES"] = str(fixtures)
    results = {}
    with tempfile.TemporaryDirectory(prefix="gpucheckup-mutation-") as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(REPO, work, ignore=COPY_IGNORE)
        os.environ["PYTHONPATH"] = os.pathsep.join([str(work / "src"), os.environ.get("PYTHONPATH", "")])
        os.chdir(work)
        for short in args.modules or list(MODULES):
            results[short] = run_module(short, work, random.Random(f"{seed}:{short}"), args.sample, args.timeout)
    print("\nmodule         score   killed/run  survivors")
    for short, (k, s, _) in results.items():
        score = f"{100 * k / (k + s):.0f}%" if k + s else "-"
        print(f"{short:<14} {score:>5}   {k:>4}/{k + s:<4}   {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
