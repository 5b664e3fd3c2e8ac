"""The core/ -> whileai and cli/ -> whileai.cli mapping, its guards, and a light ``import whileai``."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import child_processes
import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "trl", "transformers", "vllm", "datasets", "accelerate", "aiohttp", "openai", "numpy", "pandas")


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_every_python_folder_is_a_listed_package() -> None:
    tool = _pyproject()["tool"]["setuptools"]
    # configs/ is data mapped into the package; its subfolders hold YAML, not Python.
    roots = {source: name for name, source in tool["package-dir"].items() if source != "configs"}
    found = set()
    for source, name in roots.items():
        for init in (REPO / source).rglob("*.py"):
            folder = init.parent.relative_to(REPO / source)
            if "__pycache__" in folder.parts:
                continue
            found.add(".".join([name, *folder.parts]))
            assert (init.parent / "__init__.py").exists(), f"{init.parent} has Python files but no __init__.py"
    assert found == set(tool["packages"]) - {"whileai.configs"}


def _run(code: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return child_processes.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_import_whileai_is_light() -> None:
    code = (
        "import sys, json, whileai; "
        "whileai.GroupwiseGrading; whileai.redistribute; import whileai.grading, whileai.methods; "
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_the_recipe_schema_and_the_spread_gate_load_no_http_client() -> None:
    # The spread gate with a scripted rule makes no call: the judge's settings in the schema must not bring the HTTP
    # client, asyncio and ssl into its start-up (about 50 ms of it).
    code = (
        "import sys, json, whileai.config, whileai.config.build, whileai.grading.gate, whileai.judge.settings; "
        "print(json.dumps([m for m in ('asyncio', 'ssl', 'urllib.request', 'aiohttp', 'whileai.http.client', "
        "'whileai.judge.client') if m in sys.modules]))"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    done = _run("import whileai.judge as j; print(j.JudgeGrader.__module__, 'build_judge' in dir(j))")
    assert done.stdout.split() == ["whileai.judge.grader", "True"], done.stderr


def test_the_command_line_s_help_loads_no_http_stack() -> None:
    # Every command pays for what ``whileai --help`` imports: the HTTP stack comes with a command that calls out.
    code = (
        "import sys, json\n"
        "from whileai.cli.main import app\n"
        "from typer.main import get_command\n"
        "try:\n"
        "    get_command(app).main(['--help'], standalone_mode=False)\n"
        "finally:\n"
        "    heavy = ('aiohttp', 'ssl', 'whileai.http.transport', 'whileai.http.endpoint')\n"
        "    found = [m for m in heavy if m in sys.modules]\n"
        "    print(json.dumps(found), file=sys.stderr)\n"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []


def test_the_source_folder_refuses_its_own_name() -> None:
    done = _run("import core")
    assert done.returncode != 0
    assert "install the project" in done.stderr and "import whileai" in done.stderr


def test_ruff_bans_importing_the_source_folders(tmp_path: Path) -> None:
    probe = REPO / "tests" / "unit" / "_ruff_probe_tmp.py"
    probe.write_text("import core\nfrom cli import main\n")
    try:
        done = child_processes.run(
            [sys.executable, "-m", "ruff", "check", "--select", "TID251", "--no-cache", str(probe)],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
    finally:
        probe.unlink()
    assert done.stdout.count("TID251") == 2, done.stdout + done.stderr


def test_pytest_imports_by_importlib() -> None:
    assert "--import-mode=importlib" in _pyproject()["tool"]["pytest"]["ini_options"]["addopts"]


def test_public_names_resolve() -> None:
    import whileai

    for name in whileai.__all__:
        assert getattr(whileai, name) is not None
    assert sorted(whileai.__all__[1:]) == sorted(whileai._LAZY)
    with pytest.raises(AttributeError):
        whileai.no_such_name  # noqa: B018


def test_the_licence_the_metadata_names_is_in_the_repository() -> None:
    project = _pyproject()["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    text = (REPO / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text
    assert "License :: OSI Approved :: Apache Software License" in project["classifiers"]
    assert project["authors"] and project["requires-python"] == ">=3.10"


def test_base_install_is_light() -> None:
    deps = " ".join(_pyproject()["project"]["dependencies"])
    for heavy in ("torch", "trl", "transformers", "vllm", "datasets"):
        assert heavy not in deps
    extras = _pyproject()["project"]["optional-dependencies"]
    assert any(d.startswith("trl>=1.16,<2") for d in extras["train"])


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = child_processes.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-w", str(dist)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("whileai_grpo-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    installed = child_processes.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True, timeout=600
    )
    assert installed.returncode == 0, installed.stderr
    code = (
        "import whileai as wai, json; "
        "print(json.dumps([wai.__file__, wai.redistribute([1, 1, 0, 0], factors={0: 1.0, 1: 0.5})]))"
    )
    done = child_processes.run([str(python), "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    path, out = json.loads(done.stdout)
    assert path.startswith(str(env_dir)) and out == [0.6666666666666666, 0.3333333333333333, -0.5, -0.5]
    show = child_processes.run([str(python), "-m", "pip", "show", "whileai-grpo"], capture_output=True, text=True)
    assert "License: Apache-2.0" in show.stdout and "Author: The whileai developers" in show.stdout, show.stdout
    metadata = next((env_dir / "lib").glob("python3*/site-packages/whileai_grpo-*.dist-info"))
    assert (metadata / "licenses" / "LICENSE").is_file() or (metadata / "LICENSE").is_file()
    assert "Classifier: License :: OSI Approved :: Apache Software License" in (metadata / "METADATA").read_text()
    script = env_dir / "bin" / "whileai"
    version = child_processes.run([str(script), "--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.strip() == "whileai 0.1.0 (whileai-grpo)"
    helped = child_processes.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "Exit codes" in helped.stdout
    # On this light install (no extra) the test suite collects: a module whose optional install is missing is
    # skipped, naming the extra, and none fails to import.
    tools = child_processes.run(
        [str(python), "-m", "pip", "install", "-q", "pytest", "hypothesis"], capture_output=True, text=True, timeout=600
    )
    assert tools.returncode == 0, tools.stderr
    collected = child_processes.run(
        [str(python), "-m", "pytest", "--collect-only", "-q", "-rs", "-p", "no:cacheprovider", str(REPO / "tests")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-2000:]
    assert "error" not in collected.stdout.splitlines()[-1], collected.stdout[-3000:]
    assert (
        "needs torch (whileai-grpo[train]" in collected.stdout
        or "pip install 'whileai-grpo[train]'" in collected.stdout
    )
