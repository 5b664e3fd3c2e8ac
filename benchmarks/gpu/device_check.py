"""The GPU device check: one command that installs whileai's missing wheels offline and runs every GPU check within
8 minutes, writing one results JSON and a log; ``--dry-run`` checks the same script on a CPU with no network.

On the GPU machine (one CUDA GPU, Python 3.12, no network), from the repository root, with the wheels from
``benchmarks/gpu/prepare_wheels.py`` carried along::

    python benchmarks/gpu/device_check.py --out "$OUT"                 # about 8 minutes
    python benchmarks/gpu/device_check.py --dry-run --out /tmp/dry      # CPU, under a minute: what CI runs

The parts, in order; each has its own time budget (``PART_BUDGETS_S``), records its status, and a failure in one
does not stop the next (what runs on the GPU runs in a fresh interpreter: ``device_workers.py``):

- ``install``: ``pip install --no-index --no-deps`` of the folder's ``required`` and ``bench`` wheels the image lacks,
  a ``fallback`` wheel only where the image's version misses a bound, whileai itself (editable, no build isolation;
  a symlinked package on ``PYTHONPATH`` if that fails), then the imports and ``pip check``.
- ``gpu_tests``: ``pytest -m gpu`` on the test files that hold ``gpu`` marks, offline (a test that needs the hub model
  ``Qwen/Qwen2.5-0.5B-Instruct`` is deselected, with the reason, unless the model is in the local hub cache).
- ``agent_recipe``: the agent recipe path (``recipes/tiny_cpu_agent_gar.yaml``: TRL's environment_factory, tool calls,
  the support verifier, GAR) through ``whileai train`` on CUDA, generation through TRL with transformers (no vLLM),
  bf16, with a model built here from a config with random weights in the shape of Qwen2.5-0.5B (``QWEN25_05B``; the
  vocabulary is the locally trained chat tokenizer's), briefly warm-started on the GPU on the seeded agent's
  conversations so that it calls tools; then TRL's logged advantages are checked against equation 3 group by group
  (``tests/integration/conftest.py``'s ``_assert_equation_3``, the ``trl_signal`` fixture's check), which must
  include groups that mix passes and failures to count.
- ``step_time``: from that run (``STEP_SHAPE``: G=8, 64 completions a step, 256-token completions), TRL's
  ``step_time`` per step and whileai's share of it: the reward function (TRL's ``_calculate_rewards``, timed around
  the call; whileai's reward function is the only one) and the grading inside it (``grading.jsonl``'s seconds).
- ``estimators``: ``benchmarks/bench_advantages.py --device cuda`` as a subprocess (whileai's estimators side by side
  with verl's and OpenRLHF's, the memory floor from the device's copy bandwidth), and here: whileai's GAE, GRPO and
  RLOO estimators on CUDA in float32 and bfloat16, with TF32 off and on, against an independent float64 reference
  (NumPy), and the device's copy bandwidth.

The results JSON (``device_check.json`` under ``--out``), every field always present:

- ``schema``: 1. ``mode``: ``"gpu"`` or ``"dry"``. ``started``: UTC ISO time. ``wall_s``: seconds in all.
  ``budget_s``: the overall budget. ``ok``: no part failed (and, dry, every dry check passed).
- ``host``: Python, platform, and (after ``install``) the versions of torch, transformers, trl, whileai, CUDA and
  the device name.
- ``parts``: ``install``, ``gpu_tests``, ``agent_recipe``, ``step_time``, ``estimators``, each with ``status``
  (``ok``, ``failed``, ``skipped`` or ``dry``), ``reason`` (why failed or skipped, else null), ``budget_s``,
  ``wall_s`` and ``result`` (the part's figures; see each ``part_*`` function).
- ``dry_checks``: dry mode only (empty otherwise): each check's ``ok`` and ``detail``.

Beside it: ``device_check.log`` (everything, subprocess output included), and where they were made
``gpu_tests.xml`` (JUnit), ``bench_advantages.txt``, ``agent_trainer_log.json`` and ``agent_grading.jsonl``.
The training run and the model live in ``--work`` (default a temporary folder), not under ``--out``.

This script does not download anything, does not change the image beyond pip installs, and never runs vLLM.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from device_workers import (  # noqa: E402  (beside this file)
    AGENT_DEVICE,
    AGENT_SHAPE,
    AGENT_STEPS,
    GPU_SIZES,
    STEP_SHAPE,
    WARM_START,
    WORKERS,
    agent_recipe,
    dry_agent_model,
    dry_agent_recipe,
    dry_estimators,
    dry_model_config,
)

HUB_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"

SCHEMA = 1
BUDGET_S = 480
PARTS = ("install", "gpu_tests", "agent_recipe", "step_time", "estimators")
PART_BUDGETS_S = {"install": 75, "gpu_tests": 90, "agent_recipe": 190, "step_time": 5, "estimators": 115}
TOP_FIELDS = ("schema", "mode", "started", "wall_s", "budget_s", "ok", "host", "parts", "dry_checks")
PART_FIELDS = ("status", "reason", "budget_s", "wall_s", "result")
STATUSES = ("ok", "failed", "skipped", "dry")

AGENT_MODEL_BUDGET_S = 100.0  # the model's build and warm start, out of agent_recipe's budget

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "WANDB_DISABLED": "true",
}


# ---------------------------------------------------------------- bookkeeping


class Log:
    """Writes to stdout and to ``device_check.log``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def __call__(self, text: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {text}"
        print(line, flush=True)
        with self.path.open("a") as handle:
            handle.write(line + "\n")

    def block(self, title: str, text: str) -> None:
        with self.path.open("a") as handle:
            handle.write(f"----- {title}\n{text}\n----- end of {title}\n")


class PartFailed(Exception):
    """A part's check failed: the message is its reason."""


class PartSkipped(Exception):
    """A part could not run here: the message is its reason."""


def new_part(budget: float) -> dict[str, Any]:
    return {"status": "skipped", "reason": "not reached", "budget_s": budget, "wall_s": 0.0, "result": {}}


def run_part(name: str, body: Callable[[float, dict[str, Any]], None], budget: float, report: dict, log: Log) -> None:
    """Run one part with its budget; record ok, failed (with the reason) or skipped, never raise."""
    part = new_part(round(budget, 1))
    report["parts"][name] = part
    if budget < 5:
        part["reason"] = "no time left in the overall budget"
        log(f"{name}: skipped ({part['reason']})")
        return
    log(f"{name}: start (budget {budget:.0f} s)")
    start = time.monotonic()
    try:
        body(budget, part["result"])
        part["status"], part["reason"] = "ok", None
    except PartSkipped as why:
        part["status"], part["reason"] = "skipped", str(why)
    except PartFailed as why:
        part["status"], part["reason"] = "failed", str(why)
    except Exception as error:  # a bug or a broken install: recorded, and the next part runs
        part["status"], part["reason"] = "failed", f"{type(error).__name__}: {error}"
    part["wall_s"] = round(time.monotonic() - start, 1)
    log(f"{name}: {part['status']} in {part['wall_s']} s" + (f" ({part['reason']})" if part["reason"] else ""))


def run_command(
    command: list[str], timeout: float, log: Log, title: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> tuple[int | None, str]:
    """Run a command in its own process group; on timeout kill that group. Returns (exit code or None, output)."""
    log(f"$ {' '.join(command)}")
    environment = {**os.environ, **OFFLINE_ENV, **(env or {})}
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=max(timeout, 1))
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the group this call started, and nothing else
        output, _ = process.communicate()
        code = None
    log.block(title, output)
    return code, output


def worker(name: str, arguments: dict[str, Any], timeout: float, log: Log, work: Path) -> dict[str, Any]:
    """Run ``worker_<name>(arguments)`` in a fresh interpreter (a CUDA failure cannot take this process down); its
    result, with the end of its output as ``output_tail``."""
    result_file = work / f"worker_{name}.json"
    result_file.unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--worker-args", json.dumps(arguments)]
    code, output = run_command([*command, "--worker-out", str(result_file)], timeout, log, f"worker {name}")
    if code is None:
        raise PartFailed(f"worker {name} ran past {timeout:.0f} s; output ends: {output[-600:]}")
    if code != 0 or not result_file.is_file():
        raise PartFailed(f"worker {name} exited {code}; output ends: {output[-1200:]}")
    return {**json.loads(result_file.read_text()), "output_tail": tail(output, 2000)}


def tail(text: str, size: int = 1500) -> str:
    return text[-size:]


# ---------------------------------------------------------------- shared with the dry run


def load_prepare_wheels() -> Any:
    """``prepare_wheels.py`` beside this file, as a module."""
    spec = importlib.util.spec_from_file_location("whileai_prepare_wheels", HERE / "prepare_wheels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def load_equation_3_check() -> Callable[[Path, int], int]:
    """The ``trl_signal`` fixture's ``assert_equation_3`` (``tests/integration/conftest.py``), loaded by path."""
    spec = importlib.util.spec_from_file_location(
        "whileai_integration_conftest", REPO / "tests" / "integration" / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._assert_equation_3


# ---------------------------------------------------------------- the parts


class Context:
    """What the parts share: the arguments, the log, the working folder and the run the agent part leaves."""

    def __init__(self, args: argparse.Namespace, log: Log, report: dict[str, Any]) -> None:
        self.args = args
        self.log = log
        self.report = report
        self.out: Path = args.out
        self.work: Path = args.work
        self.run_dir = self.work / "agent_run"
        self.reward_calls: list[dict[str, float]] | None = None


def _installed_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def part_install(ctx: Context, budget: float, result: dict[str, Any]) -> None:
    """Result: ``folder_check`` (prepare_wheels' report), ``installed`` and ``already_present`` (name -> version),
    ``fallbacks_installed``, ``unmet_after`` (bounds of the installed wheels the environment still misses: recorded,
    not failed), ``whileai`` (``"present"``, ``"editable"`` or ``"shim"``), ``host`` (``worker_host``: the versions
    and the device, after importing trl, datasets, pydantic, aiohttp and whileai's training modules), ``pip_check``
    (its lines about whileai and the required and fallback wheels). Failed when pip fails, an import fails or CUDA
    is not seen."""
    deadline = time.monotonic() + budget
    wheels = load_prepare_wheels()
    folder: Path = ctx.args.wheels
    if not folder.is_dir():
        raise PartFailed(f"no wheel folder at {folder}: run prepare_wheels.py where pip works and carry the folder")
    check = wheels.check_folder(folder)
    result["folder_check"] = {k: v for k, v in check.items() if k != "left_to_image"}
    by_group: dict[str, list[Path]] = {}
    names: dict[Path, str] = {}
    for w in wheels.wheel_list():
        for path in folder.glob("*.whl"):
            if wheels.normalize(path.name.split("-")[0]) == wheels.normalize(w.name):
                by_group.setdefault(w.group, []).append(path)
                names[path] = w.name
    pip = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-cache-dir", "--no-compile"]
    pip.append("--find-links")
    pip.append(str(folder))
    present = {names[p]: _installed_version(names[p]) for g in ("required", "bench") for p in by_group.get(g, [])}
    result["already_present"] = {k: v for k, v in present.items() if v is not None}
    todo = [p for g in ("required", "bench") for p in by_group.get(g, []) if present[names[p]] is None]
    if todo:
        code, output = run_command([*pip, *map(str, todo)], deadline - time.monotonic(), ctx.log, "pip install")
        if code != 0:
            raise PartFailed(f"pip install failed: {tail(output, 800)}")
    result["installed"] = {names[p]: _installed_version(names[p]) for p in todo}
    # A fallback wheel goes in only where the image's version misses a bound of an installed required wheel.
    unmet = _unmet_bounds([names[p] for p in by_group.get("required", [])], wheels)
    fallbacks = [p for p in by_group.get("fallback", []) if wheels.normalize(names[p]) in unmet]
    if fallbacks:
        code, output = run_command([*pip, *map(str, fallbacks)], deadline - time.monotonic(), ctx.log, "fallbacks")
        if code != 0:
            raise PartFailed(f"pip install of the fallback wheels failed: {tail(output, 800)}")
    result["fallbacks_installed"] = {names[p]: unmet[wheels.normalize(names[p])] for p in fallbacks}
    result["unmet_after"] = _unmet_bounds([names[p] for p in by_group.get("required", [])], wheels)
    result["whileai"] = _install_whileai(ctx, deadline)
    code, output = run_command([sys.executable, "-m", "pip", "check"], 30, ctx.log, "pip check")
    # verl's and OpenRLHF's own requirements are left out by design (bench_advantages.py stubs them)
    bench = {wheels.normalize(names[p]) for p in by_group.get("bench", [])}
    ours = {wheels.normalize(n) for n in names.values()} - bench | {"whileai-grpo"}
    lines = output.splitlines()
    result["pip_check"] = [line for line in lines if wheels.normalize(line.split(" ")[0]) in ours][:40]
    result["pip_check_other_lines"] = len(lines) - len(result["pip_check"])
    host = worker("host", {}, max(5.0, deadline - time.monotonic()), ctx.log, ctx.work)
    host.pop("output_tail")
    result["host"] = host
    ctx.report["host"].update(host)
    if not host["cuda_available"]:
        raise PartFailed("torch sees no CUDA device")
    # Bounds still unmet (the image's own packages, e.g. pyarrow for datasets) are recorded, not failed: the imports
    # above worked, and the parts after this one say whether the packages do.


def _unmet_bounds(names: list[str], wheels: Any) -> dict[str, str]:
    """Requirements of the installed distributions ``names`` that the environment misses: name -> what is wrong."""
    from importlib.metadata import requires

    unmet: dict[str, str] = {}
    for name in names:
        if _installed_version(name) is None:
            unmet[wheels.normalize(name)] = "not installed"
            continue
        for requirement in wheels.target_requirements(requires(name) or []):
            have = _installed_version(requirement.name)
            if have is None:
                unmet[wheels.normalize(requirement.name)] = f"{name} needs {requirement}; not installed"
            elif requirement.specifier and not requirement.specifier.contains(have, prereleases=True):
                unmet[wheels.normalize(requirement.name)] = f"{name} needs {requirement}; have {have}"
    return unmet


def _install_whileai(ctx: Context, deadline: float) -> str:
    """whileai from this working tree: already importable, else editable without build isolation (the image has
    setuptools and wheel), else a package of symlinks on PYTHONPATH for every later subprocess."""
    spec = importlib.util.find_spec("whileai")
    if spec is not None and spec.origin and Path(spec.origin).resolve().is_relative_to(REPO):
        return "present"
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation", "-e"]
    code, _ = run_command([*command, str(REPO)], max(5.0, deadline - time.monotonic()), ctx.log, "whileai")
    if code == 0:
        return "editable"
    shim = ctx.work / "shim" / "whileai"
    shutil.rmtree(shim.parent, ignore_errors=True)
    shim.mkdir(parents=True)
    for entry in (REPO / "core").iterdir():
        if entry.name != "__pycache__":
            (shim / entry.name).symlink_to(entry)
    (shim / "cli").symlink_to(REPO / "cli")
    (shim / "configs").symlink_to(REPO / "configs")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim.parent), os.environ.get("PYTHONPATH")]))
    return "shim"


def gpu_test_files() -> list[Path]:
    """The test files that hold a ``gpu`` mark."""
    return sorted(p for p in (REPO / "tests").rglob("test_*.py") if "mark.gpu" in p.read_text())


def hub_model_cached(model: str = HUB_MODEL) -> bool:
    """Whether ``model`` is in the local hub cache (nothing can be downloaded on the device machine)."""
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    cache = Path(os.environ.get("HF_HUB_CACHE", home / "hub"))
    return any((cache / f"models--{model.replace('/', '--')}" / "snapshots").glob("*/config.json"))


def part_gpu_tests(ctx: Context, budget: float, result: dict[str, Any]) -> None:
    """Result: ``files``, ``deselected`` (test and reason), ``exit_code``, counts ``passed``, ``failed``, ``errors``,
    ``skipped``, and ``tests`` (each test's name, outcome and message, from the JUnit file)."""
    files = gpu_test_files()
    result["files"] = [str(p.relative_to(REPO)) for p in files]
    deselect = []
    if not hub_model_cached():
        test = "tests/integration/test_gpu_recipe.py::test_refund_agent_recipe_trains_two_steps"
        deselect.append({"test": test, "reason": f"needs {HUB_MODEL} from the hub; the machine has no network"})
    result["deselected"] = deselect
    junit = ctx.out / "gpu_tests.xml"
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-q", "-rfEs"]
    command += [f"--junitxml={junit}", *(f"--deselect={d['test']}" for d in deselect), *result["files"]]
    code, output = run_command(command, budget - 5, ctx.log, "pytest -m gpu")
    result["exit_code"] = code
    result.update(_junit_summary(junit))
    if code is None:
        raise PartFailed(f"pytest ran past its budget; output ends: {tail(output, 600)}")
    if code != 0 or result.get("failed") or result.get("errors"):
        raise PartFailed(f"pytest exited {code}: {result.get('failed')} failed, {result.get('errors')} errors")
    if not result.get("passed"):
        raise PartFailed("no gpu test ran: every one was skipped (see tests)")


def _junit_summary(path: Path) -> dict[str, Any]:
    import xml.etree.ElementTree as ElementTree

    if not path.is_file():
        return {"tests": []}
    tests = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", None
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome, message = kind if kind != "failure" else "failed", (found.get("message") or "")[:300]
        tests.append({"name": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome, "message": message})
    counts = {k: sum(t["outcome"] == k for t in tests) for k in ("passed", "failed", "skipped")}
    return {**counts, "errors": sum(t["outcome"] == "error" for t in tests), "tests": tests}


def part_agent_recipe(ctx: Context, budget: float, result: dict[str, Any]) -> None:
    """Result: ``model`` (``build_agent_model``'s figures), ``recipe`` (the trainer section), ``train`` (exit code,
    wall seconds, steps, spread verdict, pass rate), ``equation_3`` (``ok``, ``groups``, ``mixed_groups``,
    ``told_apart``: groups whose passes the grader told apart, ``error``). Failed also when no group mixed passes
    and failures: the check would then hold for any advantage rule that gives a flat group 0."""
    import yaml

    deadline = time.monotonic() + budget
    model_dir = ctx.work / "agent_model"
    shutil.rmtree(ctx.run_dir, ignore_errors=True)
    model_budget = min(AGENT_MODEL_BUDGET_S, budget * 0.6)
    arguments = {"folder": str(model_dir), "device": AGENT_DEVICE, "shape": AGENT_SHAPE, "warm": WARM_START}
    result["model"] = worker("agent_model", arguments, model_budget, ctx.log, ctx.work)
    result["model"].pop("output_tail", None)
    recipe = agent_recipe(str(model_dir), str(ctx.run_dir))
    result["recipe"] = recipe["trainer"]
    recipe_file = ctx.work / "agent_recipe.yaml"
    recipe_file.write_text(yaml.safe_dump(recipe, sort_keys=False))
    train = worker("agent_train", {"recipe": str(recipe_file)}, deadline - time.monotonic() - 5, ctx.log, ctx.work)
    ctx.reward_calls = train["reward_calls"]
    summary_file = ctx.run_dir / "whileai_run.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    result["train"] = {
        "exit_code": train["exit_code"],
        "wall_s": train["wall_s"],
        "steps": summary.get("steps"),
        "spread_verdict": (summary.get("spread") or {}).get("verdict"),
        "reward_calls": len(train["reward_calls"]),
    }
    _copy_run_logs(ctx)
    if train["exit_code"] not in (0, None):
        said = [line for line in train["output_tail"].splitlines() if line.startswith("whileai: error")]
        raise PartFailed(
            f"whileai train exited {train['exit_code']}: {said[-1] if said else tail(train['output_tail'], 400)}"
        )
    graded = [json.loads(line) for line in (ctx.run_dir / "grading.jsonl").read_text().splitlines() if line.strip()]
    graded = [g for g in graded if g.get("phase") == "train"]
    passes = [p for g in graded for p in g["passed"]]
    result["train"]["pass_rate"] = round(sum(passes) / len(passes), 3) if passes else None
    check: dict[str, Any] = {
        "groups": len(graded),
        "mixed_groups": sum(0 < sum(g["passed"]) < len(g["passed"]) for g in graded),
    }
    result["equation_3"] = check
    try:
        check["told_apart"] = load_equation_3_check()(ctx.run_dir, STEP_SHAPE["num_generations"])
        check["ok"], check["error"] = True, None
    except AssertionError as error:
        check["ok"], check["error"] = False, tail(str(error), 800)
        raise PartFailed(f"TRL's logged advantages differ from equation 3: {tail(str(error), 300)}") from None
    if summary.get("steps") != AGENT_STEPS:
        raise PartFailed(f"the run recorded {summary.get('steps')} steps, not {AGENT_STEPS}")
    if not check["mixed_groups"]:
        raise PartFailed(
            f"equation 3 held only trivially: no group mixed passes and failures (pass rate "
            f"{result['train']['pass_rate']}); the warm start did not make the model pass some scenarios"
        )


def _trainer_log(run_dir: Path) -> list[dict[str, Any]]:
    """TRL's ``log_history`` of a run: its ``trainer_state.json``, else the newest checkpoint's."""
    candidates = [run_dir / "trainer_state.json", run_dir / "final" / "trainer_state.json"]
    candidates += sorted(run_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name[11:]))[::-1]
    for path in candidates:
        if path.is_file():
            return json.loads(path.read_text()).get("log_history", [])
    return []


def _copy_run_logs(ctx: Context) -> None:
    """The run's small logs next to the JSON (the run folder itself stays in --work)."""
    history = _trainer_log(ctx.run_dir)
    if history:
        (ctx.out / "agent_trainer_log.json").write_text(json.dumps(history, indent=1) + "\n")
    grading = ctx.run_dir / "grading.jsonl"
    if grading.is_file():
        shutil.copyfile(grading, ctx.out / "agent_grading.jsonl")


def part_step_time(ctx: Context, budget: float, result: dict[str, Any]) -> None:
    """Result: ``shape`` (``STEP_SHAPE``), ``steps`` (per step: TRL's ``step_time_s``, ``reward_s`` and
    ``grading_s`` and their ``reward_share`` and ``grading_share`` of the step, the mean completion length), and
    the medians over the steps after the first (``median_step_time_s``, ``median_reward_share``,
    ``median_grading_share``)."""
    result["shape"] = STEP_SHAPE
    history = [h for h in _trainer_log(ctx.run_dir) if "step_time" in h]
    if not history or ctx.reward_calls is None:
        raise PartSkipped("the agent_recipe part left no training run to read")
    grading_file = ctx.run_dir / "grading.jsonl"
    graded = [json.loads(line) for line in grading_file.read_text().splitlines() if line.strip()]
    steps = []
    for index, entry in enumerate(history):
        reward = ctx.reward_calls[index]["seconds"] if index < len(ctx.reward_calls) else None
        grading = sum(g.get("seconds") or 0.0 for g in graded if g.get("step") == index and g.get("phase") == "train")
        step_time = entry["step_time"]
        steps.append(
            {
                "step": entry.get("step", index + 1),
                "step_time_s": round(step_time, 3),
                "reward_s": None if reward is None else round(reward, 6),
                "grading_s": round(grading, 6),
                "reward_share": None if reward is None else round(reward / step_time, 6),
                "grading_share": round(grading / step_time, 6),
                "mean_completion_length": entry.get("completions/mean_length"),
            }
        )
    result["steps"] = steps
    measured = steps[1:] or steps
    result["measured"] = "steps after the first (the first warms up)" if steps[1:] else "the only step"
    result["median_step_time_s"] = statistics.median(s["step_time_s"] for s in measured)
    shares = [s["reward_share"] for s in measured if s["reward_share"] is not None]
    result["median_reward_share"] = statistics.median(shares) if shares else None
    result["median_grading_share"] = statistics.median(s["grading_share"] for s in measured)


def part_estimators(ctx: Context, budget: float, result: dict[str, Any]) -> None:
    """Result: ``bench`` (``bench_advantages.py --device cuda``: exit code, the copy bandwidth it measured, its
    target lines, peers it could not import; full output in ``bench_advantages.txt``) and ``precision``
    (``estimator_precision``: each case's dtype, TF32 setting, error against float64 and ``ok``; ``tf32_control``;
    ``copy_bandwidth_gbs``; ``all_ok``)."""
    deadline = time.monotonic() + budget
    bench_budget = max(10.0, budget - 45)
    command = [sys.executable, str(REPO / "benchmarks" / "bench_advantages.py"), "--device", "cuda"]
    if ctx.args.bench_quick:
        command.append("--quick")
    code, output = run_command(command, bench_budget, ctx.log, "bench_advantages")
    (ctx.out / "bench_advantages.txt").write_text(output)
    lines = output.splitlines()
    result["bench"] = {
        "exit_code": code,
        "timed_out": code is None,
        "bandwidth_line": next((line for line in lines if "GB/s" in line), None),
        "targets": [line[2:] for line in lines if line.startswith("- ") and ("met" in line or "MISSED" in line)],
        "peers_missing": [line[2:] for line in lines if "not importable" in line],
    }
    arguments = {"device": "cuda", "sizes": GPU_SIZES, "max_s": max(5.0, deadline - time.monotonic() - 15)}
    precision = worker("estimators", arguments, max(10.0, deadline - time.monotonic()), ctx.log, ctx.work)
    precision.pop("output_tail")
    result["precision"] = precision
    failed = [c for c in precision["cases"] if not c["ok"]]
    if failed:
        raise PartFailed(f"{len(failed)} estimator case(s) differ from float64 beyond tolerance: {failed[:3]}")
    if code != 0:
        raise PartFailed(f"bench_advantages.py exited {code}")


# ---------------------------------------------------------------- dry run


def dry_checks(ctx: Context) -> dict[str, dict[str, Any]]:
    """The checks of ``--dry-run`` (CPU, no network), each ``{"ok": bool, "detail": ...}``."""
    checks: dict[str, dict[str, Any]] = {}

    def check(name: str, body: Callable[[], Any]) -> None:
        start = time.monotonic()
        try:
            detail = body()
            checks[name] = {"ok": True, "detail": detail}
        except Exception as error:
            checks[name] = {"ok": False, "detail": f"{type(error).__name__}: {error}"}
        checks[name]["wall_s"] = round(time.monotonic() - start, 2)
        ctx.log(f"dry check {name}: {'ok' if checks[name]['ok'] else 'FAILED'} {checks[name]['detail']}")

    check("arguments", lambda: {k: str(v) for k, v in sorted(vars(ctx.args).items())})
    check("wheels", lambda: _dry_wheels(ctx.args.wheels))
    check("model_config", dry_model_config)
    check("agent_model", lambda: dry_agent_model(ctx.work))
    check("agent_recipe", lambda: dry_agent_recipe(ctx.work))
    check("equation_3_check", lambda: load_equation_3_check().__name__)
    check("gpu_tests", lambda: [str(p.relative_to(REPO)) for p in gpu_test_files()] or _fail("no gpu-marked tests"))
    check("estimators", dry_estimators)
    return checks


def _fail(message: str) -> Any:
    raise AssertionError(message)


def _dry_wheels(folder: Path) -> dict[str, Any]:
    """The wheel folder is complete for the target machine; without a folder, the list covers what pyproject names
    and the image lacks."""
    import tomllib
    from packaging.requirements import Requirement

    wheels = load_prepare_wheels()
    if folder.is_dir() and any(folder.glob("*.whl")):
        report = wheels.check_folder(folder)
        if not report["ok"]:
            raise AssertionError(json.dumps({k: v for k, v in report.items() if k != "left_to_image"}))
        return {"checked": "folder", "total_mib": round(report["total_bytes"] / 2**20, 2)}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    named = [*project["dependencies"], *project["optional-dependencies"]["train"]]
    listed = {wheels.normalize(w.name) for w in wheels.wheel_list() if w.group == "required"}
    lacking = [r for r in named if wheels.normalize(Requirement(r).name) not in wheels.IMAGE_PACKAGES | listed]
    if lacking:
        raise AssertionError(f"pyproject names {lacking}: neither in the image nor in prepare_wheels' list")
    return {"checked": "list against pyproject", "required": sorted(listed), "trl": wheels.trl_spec()}


# ---------------------------------------------------------------- entry point


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog='example: python benchmarks/gpu/device_check.py --out "$OUT"   (exit 0: no part failed, 1: one did)',
    )
    parser.add_argument("--out", type=Path, help="folder for device_check.json and the log (required)")
    parser.add_argument("--dry-run", action="store_true", help="CPU only, no network, no install: check the script")
    parser.add_argument("--wheels", type=Path, default=HERE / "wheels", help="the prepare_wheels.py folder")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder for the model and the run")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help=f"seconds in all (default {BUDGET_S})")
    parser.add_argument("--skip", action="append", default=[], choices=PARTS, help="leave a part out (repeatable)")
    parser.add_argument("--bench-quick", action="store_true", help="pass --quick to bench_advantages.py")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--worker-args", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is None and args.out is None:
        parser.error("the following arguments are required: --out")
    if args.worker is not None and args.worker_out is None:
        parser.error("--worker needs --worker-out")
    return args


def new_report(mode: str, budget: float) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "mode": mode,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_s": 0.0,
        "budget_s": budget,
        "ok": False,
        "host": {"python": platform.python_version(), "platform": platform.platform()},
        "parts": {},
        "dry_checks": {},
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        result = WORKERS[args.worker](json.loads(args.worker_args))
        args.worker_out.write_text(json.dumps(result, indent=1, default=str) + "\n")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    args.work = args.work or Path(tempfile.mkdtemp(prefix="whileai_device_check_"))
    args.work.mkdir(parents=True, exist_ok=True)
    log = Log(args.out / "device_check.log")
    report = new_report("dry" if args.dry_run else "gpu", args.budget)
    ctx = Context(args, log, report)
    started = time.monotonic()
    log(f"device check ({report['mode']}): out {args.out}, work {args.work}, budget {args.budget:.0f} s")
    if args.dry_run:
        for name in PARTS:
            part = new_part(PART_BUDGETS_S[name])
            part.update(status="dry", reason="dry run: nothing ran on a GPU")
            report["parts"][name] = part
        report["dry_checks"] = dry_checks(ctx)
        report["ok"] = all(c["ok"] for c in report["dry_checks"].values())
    else:
        bodies = {
            "install": part_install,
            "gpu_tests": part_gpu_tests,
            "agent_recipe": part_agent_recipe,
            "step_time": part_step_time,
            "estimators": part_estimators,
        }
        for index, name in enumerate(PARTS):
            if name in args.skip:
                report["parts"][name] = {**new_part(0), "reason": "left out with --skip"}
                continue
            # Each part gets its own budget, less whatever the parts after it need to stay within the whole.
            later = sum(PART_BUDGETS_S[n] for n in PARTS[index + 1 :] if n not in args.skip)
            left = args.budget - (time.monotonic() - started)
            budget = min(PART_BUDGETS_S[name], max(left - later, min(left, PART_BUDGETS_S[name]) * 0.5))
            run_part(name, lambda b, r, body=bodies[name]: body(ctx, b, r), budget, report, log)
            _write(report, started, args.out)
        report["ok"] = not any(p["status"] == "failed" for p in report["parts"].values())
    _write(report, started, args.out)
    log(f"done in {report['wall_s']} s: " + ", ".join(f"{k} {v['status']}" for k, v in report["parts"].items()))
    return 0 if report["ok"] else 1


def _write(report: dict[str, Any], started: float, out: Path) -> None:
    report["wall_s"] = round(time.monotonic() - started, 1)
    (out / "device_check.json").write_text(json.dumps(report, indent=1, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
