"""How ``run_training`` leaves torch.distributed: a run that returns destroys the process group, one that raises
leaves it alone.

A gloo group still alive when a launched process exits can end that finished process in std::terminate (SIGABRT);
``tests/integration/test_launch_configs.py`` runs the two-process launch for real, where the abort is a rare race.
Here a real one-process gloo group stands in for the launch, and ``_train`` is replaced so that only the ending runs:
the returned result comes back with the group gone, and an error or Ctrl-C keeps its exception and its mark in
``whileai_run.json`` without a barrier that a lost peer would never reach.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from whileai.training import run  # noqa: E402


@pytest.fixture
def group(tmp_path: Path) -> Iterator[None]:
    """A one-process gloo group, destroyed afterwards if the code under test left it."""
    assert not dist.is_initialized()
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _loaded(out: Path) -> SimpleNamespace:
    """What run_training reads of a setup before ``_train``: the folder, a model with nothing to fetch, and no
    verifier of the user's to check."""
    data = SimpleNamespace(dataset="builtin:echo_digits", num_prompts=2, eval_prompts=None, seed=0)
    verifier = SimpleNamespace(builtin="echoes_digits", function=None, in_process=False)
    trainer = SimpleNamespace(model_dump=dict)
    return SimpleNamespace(output_dir=out, model=None, data=data, verifier=verifier, trainer=trainer, where="r")


def test_a_finished_run_destroys_the_process_group(group, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    finished = run.TrainingResult(tmp_path, None, steps=2)
    monkeypatch.setattr(run, "_train", lambda *args: finished)
    assert run.run_training(_loaded(tmp_path)) is finished
    assert not dist.is_initialized()


@pytest.mark.parametrize(("stop", "status"), [(RuntimeError("boom"), "failed"), (KeyboardInterrupt(), "interrupted")])
def test_a_run_that_raises_leaves_the_group_and_its_exception(
    group, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: BaseException, status: str
) -> None:
    def stopping(*args):
        raise stop

    monkeypatch.setattr(run, "_train", stopping)
    with pytest.raises(type(stop)):
        run.run_training(_loaded(tmp_path))
    assert dist.is_initialized()  # no barrier on the way out: a failed peer would never reach it
    assert json.loads((tmp_path / "whileai_run.json").read_text())["status"] == status


def test_one_process_without_a_group_ends_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not dist.is_initialized()
    finished = run.TrainingResult(tmp_path, None)
    monkeypatch.setattr(run, "_train", lambda *args: finished)
    assert run.run_training(_loaded(tmp_path)) is finished
