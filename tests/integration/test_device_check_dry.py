"""The GPU device check without a GPU: ``benchmarks/gpu/device_check.py --dry-run`` as a subprocess, and the wheel
list of ``benchmarks/gpu/prepare_wheels.py`` against the installed packages' own requirements.

Not marked ``gpu``: CI runs these. The dry run writes the JSON the GPU run writes, with every part ``dry``, and
checks what can be checked on a CPU with no network: the wheel list, the Qwen2.5-0.5B-shaped config (counted, not
allocated), the GPU part's model builder on a narrow shape, the recipe it trains, the equation-3 check it reuses
and the estimators against the float64 reference.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path
from types import ModuleType

import child_processes
import pytest

REPO = Path(__file__).resolve().parents[2]
GPU = REPO / "benchmarks" / "gpu"

# What the wheel folder must cover: whileai's train-time packages that the GPU image lacks, and all of their own
# requirements that the image lacks, on the target machine (CPython 3.12, x86-64 Linux).
ROOTS = ("trl", "datasets", "pydantic")


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"whileai_gpu_{name}", GPU / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def device_check() -> ModuleType:
    return _load("device_check")


@pytest.fixture(scope="module")
def device_workers() -> ModuleType:
    return _load("device_workers")


@pytest.fixture(scope="module")
def prepare_wheels() -> ModuleType:
    return _load("prepare_wheels")


# ---------------------------------------------------------------- the dry run, as CI runs it


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One dry run with no wheel folder (as on CI: the folder is git-ignored), so the list is checked instead."""
    pytest.importorskip("trl")
    pytest.importorskip("transformers")
    if sys.version_info < (3, 11):
        pytest.skip("the device check reads pyproject.toml with tomllib (Python 3.11+)")
    where = tmp_path_factory.mktemp("dry")
    command = [sys.executable, str(GPU / "device_check.py"), "--dry-run", "--out", str(where / "out")]
    command += ["--work", str(where / "work"), "--wheels", str(where / "no_wheels")]
    result = child_processes.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    return result, where / "out"


@pytest.mark.slow
def test_dry_run_passes_and_writes_the_documented_json(dry_run, device_check: ModuleType) -> None:
    result, out = dry_run
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    report = json.loads((out / "device_check.json").read_text())
    assert tuple(report) == device_check.TOP_FIELDS
    for field in (*device_check.TOP_FIELDS, *device_check.PART_FIELDS, *device_check.PARTS):
        assert f"``{field}``" in device_check.__doc__, f"{field} is not documented in the module docstring"
    assert report["schema"] == device_check.SCHEMA and report["mode"] == "dry" and report["ok"] is True
    assert tuple(report["parts"]) == device_check.PARTS
    for name, part in report["parts"].items():
        assert tuple(part) == device_check.PART_FIELDS, name
        assert part["status"] == "dry" and part["reason"], name
        assert part["budget_s"] == device_check.PART_BUDGETS_S[name]
    assert sum(device_check.PART_BUDGETS_S.values()) <= device_check.BUDGET_S <= 8 * 60
    checks = report["dry_checks"]
    expected = {"arguments", "wheels", "model_config", "agent_model", "agent_recipe", "equation_3_check"}
    assert expected | {"gpu_tests", "estimators"} == set(checks)
    assert all(check["ok"] for check in checks.values()), {k: v for k, v in checks.items() if not v["ok"]}
    assert (out / "device_check.log").read_text().count("dry check") == len(checks)


@pytest.mark.slow
def test_dry_run_checked_the_shapes_it_promises(dry_run, device_workers: ModuleType) -> None:
    _, out = dry_run
    checks = json.loads((out / "device_check.json").read_text())["dry_checks"]
    assert checks["model_config"]["detail"]["parameters"] == device_workers.QWEN25_05B_PARAMETERS == 494_032_768
    assert checks["wheels"]["detail"]["checked"] == "list against pyproject"
    trainer = checks["agent_recipe"]["detail"]["trainer"]
    assert (trainer["num_generations"], trainer["per_device_train_batch_size"], trainer["max_completion_length"]) == (
        8,
        64,
        256,
    )
    assert trainer["bf16"] is True and checks["agent_recipe"]["detail"]["model"]["dtype"] == "bfloat16"
    assert checks["agent_model"]["detail"]["warm_start_steps"] == 2
    assert "tests/integration/test_gpu_recipe.py" in checks["gpu_tests"]["detail"]
    assert checks["estimators"]["detail"]["cases"] >= 12


def test_arguments_need_an_output_folder() -> None:
    result = child_processes.run(
        [sys.executable, str(GPU / "device_check.py"), "--dry-run"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2 and "--out" in result.stderr


def test_the_float64_references_match_a_hand_computed_row(device_workers: ModuleType) -> None:
    """7.1's row: the lambda = 0 advantage of position 1 bootstraps from V(c5) = 0.6 across the tool span."""
    mask = [[1, 1, 0, 0, 0, 1, 1, 0, 0, 1]]
    rewards = [[0, -0.1, 0, 0, 0, 0, -0.1, 0, 0, 1.0]]
    values = [[0.5, 0.4, 9, 9, 9, 0.6, 0.7, 9, 9, 0.8]]
    advantages, targets = device_workers.numpy_gae(rewards, values, mask, 1.0, 0.0)
    assert advantages[0, 1] == pytest.approx(0.1) and advantages[0, 2] == 0.0
    assert targets[0, 9] == pytest.approx(1.0)  # the last policy token: its reward, nothing after it
    grpo = device_workers.numpy_groups([1, 0, 0, 0, 0, 0, 0, 0], 8, "grpo")
    rloo = device_workers.numpy_groups([1, 0, 0, 0, 0, 0, 0, 0], 8, "rloo")
    assert grpo[0] == pytest.approx(2.4742, abs=1e-4) and rloo[1] == pytest.approx(-1 / 7)


# ---------------------------------------------------------------- the wheel list


def _closure(image: frozenset[str], normalize, target: dict[str, str]) -> tuple[set[str], set[str]]:
    """Every distribution ROOTS need on the target machine (its marker environment ``target``) that the image lacks
    (read from the installed packages' ``requires``, extras followed), and those whose requirements could not be read
    here (not installed)."""
    from packaging.requirements import Requirement

    needed: set[str] = set()
    unread: set[str] = set()
    seen: set[tuple[str, str]] = set()
    queue = [(root, "") for root in ROOTS]
    while queue:
        name, extra = queue.pop()
        key = normalize(name)
        if key in image or (key, extra) in seen:
            continue
        seen.add((key, extra))
        needed.add(key)
        try:
            lines = requires(name) or []
        except PackageNotFoundError:
            unread.add(key)
            continue
        for line in lines:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate({**target, "extra": extra}):
                continue
            queue += [(requirement.name, "")] + [(requirement.name, e) for e in requirement.extras]
    return needed, unread


def test_wheel_list_covers_every_requirement_the_image_lacks(prepare_wheels: ModuleType) -> None:
    for root in ROOTS:
        pytest.importorskip(root)
    listed = {prepare_wheels.normalize(w.name) for w in prepare_wheels.wheel_list() if w.group == "required"}
    needed, unread = _closure(prepare_wheels.IMAGE_PACKAGES, prepare_wheels.normalize, prepare_wheels.TARGET_ENV)
    assert set(map(prepare_wheels.normalize, ROOTS)) <= needed  # the image has none of the three
    assert not unread, f"installed here without their metadata: {sorted(unread)}"
    assert not needed - listed, f"prepare_wheels.py's list lacks {sorted(needed - listed)}"
    assert not listed - needed, f"prepare_wheels.py's list has what nothing needs: {sorted(listed - needed)}"


def test_wheel_list_pulls_nothing_the_image_has(prepare_wheels: ModuleType) -> None:
    groups = {}
    for w in prepare_wheels.wheel_list():
        groups.setdefault(w.group, set()).add(prepare_wheels.normalize(w.name))
    assert set(groups) == {"required", "bench", "fallback"}
    assert not (groups["required"] | groups["bench"]) & prepare_wheels.IMAGE_PACKAGES
    assert groups["fallback"] <= prepare_wheels.IMAGE_PACKAGES  # installed there only when the image's is too old
    names = [prepare_wheels.normalize(w.name) for w in prepare_wheels.wheel_list()]
    assert len(names) == len(set(names)), "one wheel per distribution: two versions stop the whole install"


def test_trl_wheel_and_the_tested_versions_are_in_pyproject_ranges(prepare_wheels: ModuleType) -> None:
    """The wheel's trl range is pyproject's, and the trl and transformers these tests run with lie inside
    pyproject's ranges (the ranges say what was tested)."""
    import tomllib
    from packaging.requirements import Requirement

    pytest.importorskip("trl")
    train = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    ranges = {Requirement(line).name: Requirement(line).specifier for line in train}
    (trl,) = [w for w in prepare_wheels.wheel_list() if w.name == "trl"]
    assert trl.spec == str(ranges["trl"])
    for name in ("trl", "transformers"):
        assert ranges[name].contains(version(name)), f"{name} {version(name)} is outside pyproject's {ranges[name]}"


def _wheel(folder: Path, filename: str, requirements: list[str]) -> None:
    """A minimal wheel: only its METADATA."""
    name, release = filename.split("-")[:2]
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {release}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requirements)
    with zipfile.ZipFile(folder / filename, "w") as archive:
        archive.writestr(f"{name}-{release}.dist-info/METADATA", metadata)


def test_check_mode_names_what_is_missing_doubled_unfit_or_unmet(prepare_wheels: ModuleType, tmp_path: Path) -> None:
    Wheel = prepare_wheels.Wheel
    wanted = [
        Wheel("alpha", "==1.0", "required", ""),
        Wheel("beta", "", "required", ""),
        Wheel("gamma", "", "bench", ""),
    ]
    _wheel(tmp_path, "alpha-1.0-py3-none-any.whl", ["beta>=2", "numpy>=1.26", "delta", 'zeta; sys_platform == "win32"'])
    _wheel(tmp_path, "beta-1.0-py3-none-any.whl", [])
    _wheel(tmp_path, "beta-2.0-cp311-cp311-manylinux_2_17_x86_64.whl", [])
    report = prepare_wheels.check_folder(tmp_path, wanted)
    assert not report["ok"]
    assert report["missing"] == ["gamma"]
    assert list(report["duplicates"]) == ["beta"]
    assert report["unfit"] == ["beta-2.0-cp311-cp311-manylinux_2_17_x86_64.whl"]  # CPython 3.11 only
    assert report["unmet"] == [
        "alpha needs beta>=2, the folder has 1.0",
        "alpha needs delta: neither in the folder nor in the image",
    ]  # zeta is Windows-only: not needed on the target
    assert report["left_to_image"] == {"numpy": ["alpha: >=1.26"]}

    clean = tmp_path / "clean"
    clean.mkdir()
    _wheel(clean, "alpha-1.0-py3-none-any.whl", ["beta>=2", "numpy>=1.26"])
    _wheel(clean, "beta-2.0-cp312-cp312-manylinux_2_17_x86_64.whl", [])
    _wheel(clean, "gamma-0.1-py3-none-any.whl", ["ray"])  # a bench wheel: its requirements are stubbed, not shipped
    assert prepare_wheels.check_folder(clean, wanted)["ok"]
