"""`gpucheckup ab` end to end on this CPU: real processes, the agent's steps.csv, interleaved sides."""

from __future__ import annotations

import json
import sys

import pytest

from gpucheckup import ab
from gpucheckup.cli import main

EX = [sys.executable, "-m", "gpucheckup.examples.launch", "--steps", "10"]


def _ab(tmp_path, *args):
    out = tmp_path / "ab.json"
    rc = main(["ab", "--warmup", "3", "--measure", "7", "--json", str(out), *args])
    assert rc == 0
    return json.loads(out.read_text())


def test_identical_commands_show_no_difference(tmp_path):
    pytest.importorskip("torch")
    r = _ab(tmp_path, "--rounds", "3", "--", *EX, "--", *EX)
    assert r["verdict"] == "same", r["sentence"]
    assert r["sentence"].startswith("No difference beyond noise")
    for side in ("a", "b"):
        assert len(r[side]["round_ms"]) == 3 and r[side]["steps"] == 3 * 7  # warm-up dropped, 7 kept each


PACED = """
import sys, time, torch
layer = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(layer.parameters(), lr=0.1)
for _ in range(int(sys.argv[1])):
    time.sleep(float(sys.argv[2]) / 1000)  # a known step time that CPU contention barely changes
    layer(torch.ones(1, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def test_the_faster_command_is_named(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "paced.py"
    script.write_text(PACED)
    slow, fast = [sys.executable, str(script), "10", "150"], [sys.executable, str(script), "10", "3"]
    r = _ab(tmp_path, "--rounds", "2", "--", *slow, "--", *fast)
    assert r["verdict"] == "faster", r["sentence"]
    assert r["b"]["median_ms"] < r["a"]["median_ms"]
    assert r["a"]["median_ms"] >= 150  # each slow step sleeps 150 ms
    assert r["sentence"].startswith("B is faster than A by")


def test_sides_from_commands_and_vary():
    a, b = ab.sides_from(["--", "python", "x.py", "--", "python", "y.py", "--fast"], None)
    assert (a.cmd, b.cmd) == (["python", "x.py"], ["python", "y.py", "--fast"])
    a, b = ab.sides_from(["--", "python", "x.py"], "OMP_NUM_THREADS=1,2")
    assert (a.env, b.env, a.cmd) == ({"OMP_NUM_THREADS": "1"}, {"OMP_NUM_THREADS": "2"}, ["python", "x.py"])


@pytest.mark.parametrize("args,words", [
    (["--", "python", "x.py"], "give two commands"),
    (["--vary", "X=1", "--", "python", "x.py"], "--vary takes ENV=v1,v2"),
    (["--rounds", "1", "--", "true", "--", "true"], "--rounds must be"),
    (["--", "true", "--", "true"], "no step times"),
    (["--", "false", "--", "true"], "exited with status 1"),
])
def test_bad_input_is_one_line(args, words, capsys):
    assert main(["ab", *args]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1
