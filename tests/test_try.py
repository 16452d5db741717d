"""`gpucheckup try` end to end on this CPU: real torch jobs, the agent's trial patches, ab's protocol.

The job (tests/jobs/try_job.py) waits 4 ms per item, 8 items a batch, in DataLoader(num_workers=0), and steps a
tiny model: about 32 ms of its step is the wait for the batch and ~1 ms the rest. With 4 workers sleeping in
parallel a batch is ready every 32 / 4 = 8 ms (sleeps need no core), so the step falls to ~8-9 ms: a saving near
75%; the test asks for at least 40% (the issue's bar), whatever load the machine is under.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpucheckup.cli import main

JOB = Path(__file__).parent / "jobs" / "try_job.py"
CMD = [sys.executable, str(JOB)]


def _line_of(text: str) -> int:
    """The line of the job's source that holds `text` (read from the file, not from gpucheckup)."""
    return next(i for i, line in enumerate(JOB.read_text().splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def tried(tmp_path_factory):
    """One trial of four fixes (the check-up, 2 rounds of base, workers and fused; one process each of the fix that
    cannot apply and of the one that breaks the job): its JSON, Markdown and HTML, and its folder."""
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("try")
    files = {k: tmp / f"try.{k}" for k in ("json", "md", "html")}
    rc = main(["try", "dataloader_workers=4,fused_optimizer,pin_memory,env:TRY_JOB_EXIT=5", "--rounds", "2",
               "--max-steps", "25", "--out", str(tmp / "runs"), "--json", str(files["json"]),
               "--markdown", str(files["md"]), "--html", str(files["html"]), "--", *CMD])
    assert rc == 0
    doc = json.loads(files["json"].read_text())
    from conftest import validate_document

    validate_document(doc)
    return doc, {k: f.read_text() for k, f in files.items()}, tmp / "runs"


def _row(doc, fix):
    return next(r for r in doc["fixes"] if r["fix"] == fix)


def test_more_dataloader_workers_measure_faster_with_the_prediction_beside(tried):
    doc, _, _ = tried
    r = _row(doc, "dataloader_workers=4")
    assert r["applied"] and r["how"].startswith("DataLoader(num_workers 0 -> 4, persistent_workers) at ")
    assert r["how"].endswith(f"{JOB.name}:{_line_of('DataLoader(Waits()')}")  # the job's own call
    assert r["verdict"] == "faster" and r["rounds"] == 2, r["sentence"]
    assert r["measured_saving_pct"] >= 40 and r["interval_pct"][0] > 0, r["sentence"]
    # the check-up sees the job wait in the DataLoader for nearly all of its step: it predicts most of it back
    assert r["predicted_saving_pct"] is not None and r["predicted_saving_pct"] >= 40, r["predicted_from"]
    assert "Predicted by the check-up" in r["sentence"] and "this trial has 4" in r["predicted_from"]
    assert doc["base_ms"] >= 8 * 4  # 8 items of 4 ms each per step without workers


def test_the_fused_optimizer_is_applied_and_measured(tried):
    doc, _, _ = tried
    r = _row(doc, "fused_optimizer")
    assert r["applied"] and r["how"].startswith("AdamW(fused=True) at ")
    assert r["how"].endswith(f"{JOB.name}:{_line_of('torch.optim.AdamW(')}")
    assert r["rounds"] == 2 and r["measured_saving_pct"] is not None and len(r["interval_pct"]) == 2
    assert r["verdict"] in ("faster", "slower", "no difference")


def test_a_fix_that_cannot_apply_says_why_and_the_job_runs(tried):
    doc, _, runs = tried
    r = _row(doc, "pin_memory")
    assert not r["applied"] and r["verdict"] == "not applied" and r["measured_saving_pct"] is None
    assert r["how"].startswith("not applied:") and "no CUDA device" in r["how"]
    # its process ran the job to --max-steps all the same: 25 steps in its step log
    (pinned,) = [d for d in runs.glob("*/*pin_memory-round1")]
    assert len((pinned / "steps.csv").read_text().splitlines()) == 1 + 25


def test_a_fix_that_breaks_the_job_is_reported_with_its_exit_code(tried):
    doc, _, _ = tried
    r = _row(doc, "env:TRY_JOB_EXIT=5")
    assert r["verdict"] == "failed" and r["exit_code"] == 5 and "status 5" in r["sentence"]


def test_the_markdown_and_html_views_show_the_same_rows(tried):
    doc, text, _ = tried
    for fix in ("dataloader\\_workers=4", "fused\\_optimizer"):
        assert fix in text["md"]
    assert "runs your command again" in text["md"] and "runs your command again" in text["html"]
    assert "<td>dataloader_workers=4</td>" in text["html"] and "Content-Security-Policy" in text["html"]
    saving = f"{_row(doc, 'dataloader_workers=4')['measured_saving_pct']:+.1f}%"
    assert saving in text["md"] and saving in text["html"]


def test_max_steps_ends_a_long_job_cleanly(tmp_path, capfd):
    pytest.importorskip("torch")
    out = tmp_path / "runs"
    assert main(["run", "--out", str(out), "--max-steps", "6", "--no-report", "--no-nvml", "--", *CMD]) == 0
    (run,) = out.iterdir()
    assert len((run / "steps.csv").read_text().splitlines()) == 1 + 6  # the job asks for 10000
    assert json.loads((run / "agent.json").read_text())["ended_by_max_steps"] == 6
    assert "Traceback" not in capfd.readouterr().err


def test_a_job_with_no_steps_ends_and_is_said_in_one_line(tmp_path, capfd):
    pytest.importorskip("torch")
    rc = main(["try", "fused_optimizer", "--no-predict", "--rounds", "2", "--max-steps", "10",
               "--out", str(tmp_path), "--", *CMD, "--steps", "5", "--no-step"])
    err = capfd.readouterr().err
    assert rc == 2 and "no step times" in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.startswith("gpucheckup")]) == 1


def test_the_commands_own_exit_code_passes_through(tmp_path, capfd):
    pytest.importorskip("torch")
    rc = main(["try", "tf32", "--no-predict", "--rounds", "2", "--out", str(tmp_path), "--", *CMD, "--exit", "3"])
    out, err = capfd.readouterr()
    assert rc == 3 and "exited with status 3" in err
    # no base check-up was asked for, so none is announced among the runs
    assert "runs your command again: the base and each fix" in out and "for the check-up" not in out


def test_options_after_the_fixes_and_the_commands_own_are_told_apart():
    from gpucheckup.cli.parser import build_parser

    args = build_parser().parse_args(["try", "tf32", "--rounds", "2", "--", "python", "x.py", "--rounds", "5"])
    assert (args.fixes, args.rounds, args.cmd) == ("tf32", 2, ["python", "x.py", "--rounds", "5"])
    args = build_parser().parse_args(["--debug", "try", "--", "python", "x.py"])
    assert (args.fixes, args.cmd) == (None, ["python", "x.py"])


@pytest.mark.parametrize("fixes,words", [("warp_speed", "no trial fix 'warp_speed'"),
                                         ("dataloader_workers=many", "takes a count"),
                                         ("env:NOVALUE", "env:NAME=VALUE")])
def test_a_fix_the_agent_does_not_know_is_one_line(fixes, words, capsys):
    assert main(["try", fixes, "--", "python", "x.py"]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


# ---- the agent's patches, called directly (no patch is installed in this process) ----

def _trial(text):
    from gpucheckup.capture.agent.trial import Trial

    torch = pytest.importorskip("torch")
    t = Trial(text, lambda records: None)
    t.torch = torch
    return t, torch


def test_workers_are_not_added_to_an_iterable_dataset_nor_a_cuda_collate():
    t, torch = _trial("dataloader_workers=4")

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    kw = {"dataset": Stream()}
    t.edit_loader(kw, "a.py:1")

    def collate(batch):
        return torch.stack(batch).cuda()

    kw2 = {"dataset": [torch.ones(1)], "collate_fn": collate}
    t.edit_loader(kw2, "b.py:2")
    assert "num_workers" not in kw and "num_workers" not in kw2
    assert [r["applied"] for r in t.records] == [False, False]
    assert "IterableDataset" in t.records[0]["how"] and "a.py:1" in t.records[0]["how"]
    assert "collate_fn builds CUDA tensors" in t.records[1]["how"]


def test_added_workers_persist_across_epochs_as_the_advice_says():
    # the advice is DataLoader(num_workers=N, persistent_workers=True): workers started once. Without persistence a
    # loader starts its workers again every epoch (each a new process that imports and builds the dataset again)
    t, torch = _trial("dataloader_workers=2")
    kw = {"dataset": [torch.ones(1)] * 4, "batch_size": 2}
    t.edit_loader(kw, "train.py:7")
    loader = torch.utils.data.DataLoader(**kw)
    assert (loader.num_workers, loader.persistent_workers) == (2, True)
    assert t.records[0]["how"] == "DataLoader(num_workers 0 -> 2, persistent_workers) at train.py:7"
    kept = {"dataset": [torch.ones(1)], "num_workers": 1, "persistent_workers": False}
    t.edit_loader(kept, "train.py:9")  # raised from 1: persistent too, as advised
    assert (kept["num_workers"], kept["persistent_workers"]) == (2, True)


def test_an_optimizer_torch_will_not_fuse_is_built_as_asked_with_torchs_reason():
    t, torch = _trial("fused_optimizer")
    params = [torch.nn.Parameter(torch.ones(3))]
    opt = torch.optim.Adam.__new__(torch.optim.Adam)
    t.fuse(torch.optim.Adam.__init__, opt, iter(params), (), {"lr": 0.1, "differentiable": True}, "c.py:3")
    assert opt.param_groups[0]["differentiable"] is True and not opt.param_groups[0]["fused"]
    assert opt.param_groups[0]["params"][0] is params[0]  # the generator was read once, for both attempts
    (rec,) = t.records
    assert not rec["applied"] and "differentiable" in rec["how"] and "c.py:3" in rec["how"]


def test_run_try_tries_what_the_check_up_proposes_with_the_prediction_beside(tmp_path, capsys):
    # the check-up of the waiting DataLoader proposes dataloader_workers (the one configuration fix the agent applies
    # here): it is tried with the workers the advice names, up to this machine's usable cores
    pytest.importorskip("torch")
    import os

    cores = len(os.sched_getaffinity(0))
    rc = main(["run", "--out", str(tmp_path), "--skip", "4", "--steps", "3", "--max-steps", "16", "--no-nvml",
               "--try", "--try-rounds", "2", "--", *CMD])
    out = capsys.readouterr().out
    assert rc == 0
    assert "runs your command again" in out and "Fixes tried: predicted beside measured" in out
    import re

    (n, m) = re.search(r"^dataloader_workers=(\d+): DataLoader\(num_workers 0 -> (\d+), persistent_workers\)", out, re.M).groups()
    assert n == m and 1 <= int(n) <= cores
    assert "Predicted by the check-up" in out


def test_the_html_page_opens_offline_and_says_each_row(tried, tmp_path):
    from browser import Browser

    doc, text, _ = tried
    page = tmp_path / "try.html"
    page.write_text(text["html"])
    with Browser() as b:
        b.open(page.as_uri())
        body = b.evaluate("document.body.innerText")
        embedded = b.evaluate("JSON.parse(document.getElementById('gpucheckup-data').textContent)")
        assert b.errors() == []
    assert "runs your command again" in body
    for row in doc["fixes"]:
        assert row["fix"] in body and row["verdict"] in body
    assert embedded == doc


def test_a_loader_rebuilt_from_the_patched_one_is_not_said_twice():
    # accelerate and Lightning build a new DataLoader from the one the job made, with its settings: already patched
    t, torch = _trial("dataloader_workers=4")
    first = {"dataset": [torch.ones(1)]}
    t.edit_loader(first, "train.py:10")
    t.edit_loader(dict(first), "accelerate/data_loader.py:99 (from train.py:20)")
    other = {"dataset": [torch.ones(1)], "num_workers": 6}
    t2, _ = _trial("dataloader_workers=4")
    t2.edit_loader(other, "eval.py:5")  # a loader with more workers than asked, and nothing applied: said
    assert first["num_workers"] == 4
    assert t.records == [{"fix": "dataloader_workers", "applied": True,
                          "how": "DataLoader(num_workers 0 -> 4, persistent_workers) at train.py:10"}]
    assert t2.records[0]["how"] == "not applied: DataLoader at eval.py:5 already has num_workers=6"


def test_a_call_made_by_a_library_names_the_jobs_frame_that_led_to_it():
    # a "library" (a file under site-packages) builds the object on the job's behalf, as the HF Trainer builds its
    # DataLoader: the library's line, then the job's own line that called it
    from gpucheckup.capture.agent.trial import call_site

    lib = "def build(f):\n    return f()\n"
    ns: dict = {}
    exec(compile(lib, "/venv/lib/python3/site-packages/fakelib/loader.py", "exec"), ns)
    here = sys._getframe().f_lineno + 1
    where = ns["build"](lambda: call_site(sys._getframe(1)))
    assert where.startswith("fakelib/loader.py:2 (from ") and where.endswith(f"test_try.py:{here})")
