"""The check-up document (docs/schema.md): one versioned shape for every kind of input, its shipped JSON
Schema, the one step time, and the tables as DataFrames, on real H200 traces and run directories."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SCHEMA, trace_path, validate_document

DATA = Path(__file__).resolve().parent / "data"
REPO = Path(__file__).resolve().parents[1]
# the top-level keys docs/schema.md lists, in its order: written here by hand, not read from the code
TOP_KEYS = ["schema_version", "gpucheckup_version", "kind", "path", "verdict", "step", "fixes", "notes", "checkups",
            "cpu_checkups", "job", "run", "cases"]
LAUNCH_RUN = next((DATA / "h200" / "runs").glob("*-launch_bound"))
ATTACH_RUN = next((DATA / "h200" / "runs").glob("*-attach-653"))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpucheckup", *args], capture_output=True, text=True, timeout=300)


def written(tmp_path: Path, path: Path) -> dict:
    """`gpucheckup analyze PATH --json FILE --quiet`, the document read with the standard library."""
    out = tmp_path / "checkup.json"
    res = cli("analyze", str(path), "--json", str(out), "--quiet")
    assert res.returncode == 0, res.stderr
    return json.loads(out.read_text())


def test_the_shipped_schema_is_the_one_the_types_generate():
    from gpucheckup.document import json_schema

    want = json.loads(json.dumps(json_schema()))
    assert json.loads(SCHEMA.read_text()) == want, "run: python scripts/write_schema.py"
    assert json.loads((REPO / "docs" / "schema.json").read_text()) == want, "run: python scripts/write_schema.py"


def test_the_schema_command_prints_it():
    res = cli("schema")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == json.loads(SCHEMA.read_text())


@pytest.mark.parametrize("case,kind,n_gpu,n_cpu,job,run", [
    ("trace", "trace", 1, 0, False, False),
    ("cpu_trace", "cpu_trace", 0, 1, False, False),
    ("rank_folder", "traces", 2, 0, True, False),
    ("run_dir", "run", 1, 0, False, True),
    ("run_ranks", "run", 2, 0, True, True),
    ("run_without_trace", "run", 0, 0, False, True),
])
def test_every_kind_of_input_gives_the_same_top_level_keys(tmp_path, case, kind, n_gpu, n_cpu, job, run):
    path = {"trace": trace_path("launch_bound"), "cpu_trace": DATA / "cpu_shapes" / "mats.json.gz",
            "rank_folder": DATA / "h200x2" / "ddp_healthy" / "traces", "run_dir": LAUNCH_RUN,
            "run_ranks": DATA / "h200x2" / "ddp_healthy", "run_without_trace": ATTACH_RUN}[case]
    doc = written(tmp_path, path)
    validate_document(doc)
    assert list(doc) == TOP_KEYS
    assert doc["schema_version"] == 6 and doc["kind"] == kind and doc["path"] == str(path)
    assert (len(doc["checkups"]), len(doc["cpu_checkups"])) == (n_gpu, n_cpu)
    assert (doc["job"] is not None, doc["run"] is not None) == (job, run)
    for r in doc["checkups"]:  # the run-level keys are once, at the top
        assert not {"run", "nvml", "step_history", "env", "run_figures", "gpucheckup_version"} & set(r)


def test_the_api_on_a_cpu_only_trace_gives_its_path_verdict_and_step(tmp_path):
    """gpucheckup.analyze on a trace without device activity: the CPU-side check-up's path, verdict and step, as the
    JSON written by the command line holds them."""
    import gpucheckup

    path = DATA / "cpu_shapes" / "mats.json.gz"
    doc = written(tmp_path, path)
    up = gpucheckup.analyze(path)
    assert up.path == str(path) == doc["cpu_checkups"][0]["trace"]["path"] and up.verdict == "cpu_only"
    assert up.figures["step_ms"] == doc["cpu_checkups"][0]["cpu"]["step_median_ms"] is not None


def test_one_trace_s_document_carries_its_verdict_step_and_fixes_at_the_top(tmp_path):
    doc = written(tmp_path, trace_path("launch_bound"))
    (r,) = doc["checkups"]
    assert doc["verdict"] == r["verdict"] and doc["fixes"] == r["fixes"] and doc["notes"] == r["notes"]
    assert doc["step"] == {"ms": r["window"]["step_ms"], "basis": r["window"]["basis"]}


def test_a_job_of_ranks_has_one_verdict_everywhere(tmp_path):
    """ddp_slow_input (two H200s): rank 1's DataLoader sleeps 40 ms a batch, rank 0 waits for it at the
    all-reduce. The job is input-bound: the document's verdict, the API's and the --fail-on gate agree."""
    run = DATA / "h200x2" / "ddp_slow_input"
    doc = written(tmp_path, run)
    assert doc["verdict"]["primary"] == "input_bound"
    assert [r["verdict"] for r in doc["job"]["ranks"]["table"]] == ["waiting", "input_bound"]
    import gpucheckup

    up = gpucheckup.analyze(run)
    assert up.verdict == "input_bound" and up.document.verdict.primary == "input_bound"
    assert [c.verdict for c in up.ranks] == ["waiting", "input_bound"]
    res = cli("analyze", str(run), "--quiet", "--fail-on", "input_bound")
    assert res.returncode == 3 and "verdict input_bound (--fail-on)" in res.stderr
    # the job's step is the slowest rank's step, which every rank waits for
    steps = [r["window"]["step_ms"] for r in doc["checkups"]]
    assert doc["step"]["ms"] == max(steps) and "slowest of 2 ranks" in doc["step"]["basis"]
    # the shipped schema gives the job's parts key by key: the ranks matched by their calls write every key of
    # `ranks` (a folder of traces sharing none writes straggler, table and matched_calls: docs/schema.md)
    schema = json.loads(SCHEMA.read_text())
    job = _definition(schema, schema["$defs"]["Document"]["properties"]["job"])
    ranks = _definition(schema, job["properties"]["ranks"])
    assert set(ranks["properties"]) == set(doc["job"]["ranks"]) and set(ranks["required"]) == {
        "straggler", "table", "matched_calls"}
    comm = _definition(schema, job["properties"]["communication"])
    coll = _definition(schema, comm["properties"]["collectives"]["items"])
    spread = _definition(schema, ranks["properties"]["distribution"]["items"])
    for part, written_part in ((comm, doc["job"]["communication"]), (coll, doc["job"]["communication"]["collectives"][0]),
                               (spread, doc["job"]["ranks"]["distribution"][0])):
        assert set(part["properties"]) == set(written_part) == set(part["required"])


def test_an_older_or_foreign_json_is_refused_with_one_line(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"gpucheckup_version": "0.1.0", "verdict": {"primary": "gpu_bound"}}))
    res = cli("compare", str(old), str(old))
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "no schema_version" in res.stderr and "again" in res.stderr


def test_compare_reads_documents_through_their_types(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for out, case in ((a, "launch_bound"), (b, "compute_bound")):
        assert cli("analyze", str(trace_path(case)), "--json", str(out), "--quiet").returncode == 0
    res = cli("compare", str(a), str(b), "--json", str(tmp_path / "cmp.json"))
    assert res.returncode == 0, res.stderr
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    da, db = json.loads(a.read_text()), json.loads(b.read_text())
    assert cmp["verdict"] == [da["verdict"]["primary"], db["verdict"]["primary"]]
    assert cmp["headline"] == "window.step_ms"  # two traces: their windows' step (docs/metrics.md, "The step time")
    assert cmp["step_change_pct"] == pytest.approx(100 * (db["step"]["ms"] / da["step"]["ms"] - 1), rel=1e-6)


# the sections of a GPU check-up the schema gives key by key (docs/schema.md, version 3's changelog)
TYPED_SECTIONS = ["trace", "steps", "kernels", "gaps", "timeline", "dataloader", "sync", "copies", "communication",
                  "cuda_api", "labels", "mfu", "roofline"]


def _definition(schema: dict, ref_or_any: dict) -> dict:
    """The object definition a property points to (through `$ref`, or the one object of an `anyOf` with null)."""
    for x in ref_or_any.get("anyOf", [ref_or_any]):
        if "$ref" in x:
            return schema["$defs"][x["$ref"].rsplit("/", 1)[1]]
    return ref_or_any


def test_each_section_of_a_checkup_has_its_keys_in_the_schema(tmp_path):
    """A reader of the JSON finds every key of trace, steps, kernels, ... in the shipped schema, with the ones
    always written required (they were open objects); keys compared with a real H200 check-up's, read as JSON."""
    schema = json.loads(SCHEMA.read_text())
    part = _definition(schema, schema["$defs"]["Document"]["properties"]["checkups"]["items"])
    doc = written(tmp_path, trace_path("compute_bound"))
    for name in TYPED_SECTIONS:
        section = _definition(schema, part["properties"][name])
        written_keys = set(doc["checkups"][0][name])
        assert set(section.get("properties", {})) >= written_keys, name
        assert set(section.get("required", [])) <= written_keys and section["required"], name
    ops = _definition(schema, _definition(schema, part["properties"]["roofline"])["properties"]["ops"]["items"])
    assert set(ops["properties"]) == set(doc["checkups"][0]["roofline"]["ops"][0]) == set(ops["required"])
    steps = _definition(schema, part["properties"]["steps"])["properties"]
    assert steps["count"] == {"type": "integer"} and steps["marked"] == {"type": "boolean"}


def test_a_run_s_info_nvml_and_step_history_have_their_keys_in_the_schema(tmp_path):
    """The same for a run directory's run-level parts (the H200 launch-bound run, read as JSON)."""
    schema = json.loads(SCHEMA.read_text())
    run = _definition(schema, schema["$defs"]["Document"]["properties"]["run"])
    doc = written(tmp_path, LAUNCH_RUN)
    for name in ("info", "nvml", "step_history"):
        section = _definition(schema, run["properties"][name])
        assert set(section.get("properties", {})) == set(doc["run"][name]) == set(section.get("required", [])), name


def test_a_light_window_s_host_samples_have_their_keys_in_the_schema(tmp_path):
    """A light window (the H200 input-bound job, stacks sampled at 100 Hz, read as JSON): its check-up's
    host_samples and their rows are in the shipped schema key by key, every key it writes known."""
    schema = json.loads(SCHEMA.read_text())
    part = _definition(schema, schema["$defs"]["Document"]["properties"]["checkups"]["items"])
    hs = written(tmp_path, DATA / "h200" / "light" / "input_bound")["checkups"][0]["host_samples"]
    section = _definition(schema, part["properties"]["host_samples"])
    assert set(section["properties"]) == set(hs) and set(section["required"]) < set(hs)
    assert {"gap_ms", "gap_covered_pct", "gap_by_state"}.isdisjoint(section["required"])  # the GPU's idle time known
    share = _definition(schema, section["properties"]["window_by_state"]["items"])
    assert set(share["properties"]) == set(hs["window_by_state"][0]) == set(share["required"])


def test_a_document_with_a_key_its_section_does_not_have_is_refused_with_one_line(tmp_path):
    """`compare` reads a check-up back through its types: a key added by hand in `steps` is named, not read."""
    good = tmp_path / "good.json"
    assert cli("analyze", str(trace_path("launch_bound")), "--json", str(good), "--quiet").returncode == 0
    doc = json.loads(good.read_text())
    doc["checkups"][0]["steps"]["p50_ms"] = 1.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    res = cli("compare", str(good), str(bad))
    bad.unlink()  # made by hand: not a document gpucheckup wrote (the suite validates those)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
    assert "not a valid check-up document" in res.stderr and "checkups[0].steps" in res.stderr


def alternating_run(tmp_path: Path, fast: float, slow: float) -> tuple[Path, list[tuple[int, float, str]]]:
    """The H200 launch_bound run directory with its plain steps' times replaced by fast and slow in turn (a
    DataLoader's two workers out of phase with the GPU); its trace, profiled steps and phases as captured."""
    run = tmp_path / "run"
    shutil.copytree(LAUNCH_RUN, run)
    rows = list(csv.DictReader((run / "steps.csv").open()))
    out = []
    for r in rows:
        if r["ms"] and r["phase"] == "":
            r["ms"] = f"{fast if int(r['step']) % 2 == 0 else slow:.3f}"
        out.append(r)
    with (run / "steps.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(out)
    return run, [(int(r["step"]), float(r["ms"]), r["phase"]) for r in out if r["ms"]]


def test_steps_that_alternate_fast_and_slow_give_the_job_s_real_rate(tmp_path):
    """Steps of 6 and 14 ms in turn run at one step per 10 ms: the step every figure stands on is the logged
    total time over the logged steps, in the JSON, the terminal header, the API and the ranks' figures."""
    run, steps = alternating_run(tmp_path, 6.0, 14.0)
    first_instrumented = min(n for n, _, phase in steps if phase)
    before = [ms for n, ms, phase in steps if phase == "" and n < first_instrumented]
    plain = [ms for _, ms, phase in steps if phase == ""]
    doc = written(tmp_path, run)
    assert doc["step"]["ms"] == pytest.approx(sum(before) / len(before), rel=1e-6)  # the unprofiled steps'
    assert doc["step"]["ms"] == pytest.approx(sum(plain) / len(plain), rel=0.02)  # the whole run's rate
    assert doc["checkups"][0]["window"]["step_ms"] == doc["step"]["ms"]
    assert doc["run"]["figures"]["steps"]["steady_ms"] == pytest.approx(10.0, rel=0.02)
    res = cli("analyze", str(run))
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.replace("\u2502", " ").split())  # the verdict panel's sides out
    assert f"step {doc['step']['ms']:.2f} ms without the profiler" in text  # the header
    assert f"step {doc['step']['ms']:.2f} ms (the step without the profiler" in text  # the verdict's basis
    import gpucheckup

    assert gpucheckup.analyze(run).figures["step_ms"] == pytest.approx(doc["step"]["ms"], rel=1e-9)


def test_the_kernels_frame_sums_to_the_document_s_kernel_totals():
    pd = pytest.importorskip("pandas", reason="CheckUp.frame needs pandas (the optional extra)")
    import gpucheckup

    up = gpucheckup.analyze(trace_path("compute_bound"))
    k = up.frame("kernels")
    assert isinstance(k, pd.DataFrame) and list(k.columns[:7]) == ["rank", "name", "category", "count", "total_ms",
                                                                   "mean_us", "pct"]
    totals = up.document.checkups[0].kernels
    assert int(k["count"].sum()) == totals.count
    assert k["total_ms"].sum() == pytest.approx(totals.total_ms, rel=1e-9)
    assert k["name"].is_unique and k["pct"].sum() == pytest.approx(100.0)
    steps = up.frame("steps")
    assert list(steps["ms"]) == pytest.approx(up.document.checkups[0].steps.per_step_ms)
    fixes = up.frame("fixes")
    assert list(fixes["key"]) == [f.key for f in up.document.fixes]
    with pytest.raises(gpucheckup.errors.CheckupError, match="one of steps, kernels"):
        up.frame("nope")


def test_frames_of_a_job_of_ranks():
    pytest.importorskip("pandas", reason="CheckUp.frame needs pandas (the optional extra)")
    import gpucheckup

    up = gpucheckup.analyze(DATA / "h200x2" / "ddp_healthy")
    ranks = up.frame("ranks")
    assert list(ranks["rank"]) == [0, 1]
    coll = up.frame("collectives")
    assert list(coll["name"]) == ["all_reduce"]
    assert sorted(up.frame("kernels")["rank"].unique()) == [0, 1]
