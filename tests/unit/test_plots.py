"""``whileai.reports.plots`` imports matplotlib only when it draws (tests/unit/test_layers.py keeps it the one
module), and a missing matplotlib is a ``MissingExtra`` naming ``pip install 'whileai-grpo[plot]'`` (exit code 3 from
``whileai report --plot``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import child_processes
import pytest
from typer.testing import CliRunner

from whileai.errors import MissingExtra


def test_reading_runs_and_their_statistics_loads_no_matplotlib() -> None:
    code = (
        "import sys, json, whileai.reports.runs, whileai.reports.experiments, whileai.stats, whileai.reports.plots; "
        "import whileai.cli.report; "
        "print(json.dumps([m for m in ('matplotlib', 'numpy', 'pandas') if m in sys.modules]))"
    )
    done = child_processes.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_a_missing_matplotlib_names_the_plot_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from whileai.cli.main import app
    from whileai.reports.plots import pyplot

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an environment without it imports
    with pytest.raises(
        MissingExtra, match=r"matplotlib is not installed for a test: pip install 'whileai-grpo\[plot\]'"
    ):
        pyplot("a test")
    run = tmp_path / "run"
    run.mkdir()
    (run / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 1, "reward": 0.5}]}))
    result = CliRunner().invoke(app, ["report", str(run), "--plot", str(tmp_path / "figure.png")])
    assert result.exit_code == 3
    assert "pip install 'whileai-grpo[plot]'" in result.stderr and not (tmp_path / "figure.png").exists()


def test_a_run_whose_checks_all_broke_still_gets_the_watch_panel_with_its_failures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.axes

    from whileai.reports.plots import plot_runs
    from whileai.reports.runs import load_report

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": 1, "whileai/pass_rate": 0.5}, {"step": 2, "whileai/pass_rate": 0.6, "whileai/watch/failed": 1.0}]
    (run / "trainer_state.json").write_text(json.dumps({"log_history": rows}))  # a broken check logs no std
    marked: list[tuple] = []
    scatter = matplotlib.axes.Axes.scatter
    monkeypatch.setattr(
        matplotlib.axes.Axes, "scatter", lambda self, *a, **k: marked.append(a) or scatter(self, *a, **k)
    )
    plot_runs([load_report(run)], tmp_path / "figure.png")
    assert marked == [((2,), (0.0,))]
