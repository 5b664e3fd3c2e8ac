"""Fetch the wheels the GPU device check installs offline, and check a folder of them without the network.

The GPU machine (one NVIDIA H200, CPython 3.12 on x86-64 Linux, no network) comes with an image that holds torch,
transformers, accelerate, numba, pyarrow, pandas, typer, rich, pyyaml, aiohttp and pytest (``IMAGE_PACKAGES``), but
not trl, datasets or pydantic, nor some of their own dependencies. This script downloads one wheel for each
distribution in ``WHEELS`` that fits that machine (``cp312`` manylinux x86-64, or pure Python), each with pip's
``--no-deps`` from the explicit list, so nothing the image already has is pulled in; it writes ``manifest.json`` and
checks that the total is well under the 64 MiB that may travel with the working tree::

    python benchmarks/gpu/prepare_wheels.py             # download into benchmarks/gpu/wheels/ (package index needed)
    python benchmarks/gpu/prepare_wheels.py --check     # no network: one fitting wheel per distribution, closed deps

``--check`` opens every wheel's ``METADATA`` and checks that each requirement (markers evaluated for the target
machine) is met by another wheel in the folder or left to the image; it reports the ones left to the image with their
version bounds, since the image's versions are not known here. The folder is git-ignored; a device run names it in
``carry``. Three groups:

- ``required``: what whileai's ``train`` extra needs that the image lacks; the device check always installs these.
- ``bench``: verl and OpenRLHF for ``benchmarks/bench_advantages.py`` (installed ``--no-deps``: that script stubs
  their heavy imports).
- ``fallback``: small packages the image has, shipped only in case its version is too old for a ``required`` wheel's
  bound; the device check installs one only when the image's version does not meet that bound.

It installs nothing here. Versions are the ones this project's CPU tests ran with; trl's is the newest release in
the range ``pyproject.toml`` allows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WHEEL_DIR = Path(__file__).resolve().parent / "wheels"
MANIFEST = "manifest.json"

# What may travel with the working tree to the device machine, and the share of it these wheels may take.
TRAVEL_LIMIT = 64 * 2**20
WHEEL_BUDGET = 32 * 2**20

# The target machine: CPython 3.12 on x86-64 Linux (Ubuntu 24.04's glibc 2.39, so any manylinux_2_N with N <= 39).
PYTHON = (3, 12)
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)] + ["manylinux2014_x86_64", "manylinux1_x86_64"]
TARGET_ENV = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "extra": "",
}

# The Python distributions the GPU image holds. Source: the workplace's device notes (KINDS.md, "Python packages
# already there", the 'cuda' image: Python 3.12.3 at /opt/torch/.venv, torch 2.11.0,
# transformers 5.17.0, accelerate 1.15.0, huggingface_hub 1.33.0). Names normalized as pip does.
IMAGE_PACKAGES = frozenset(
    """
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
    charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
    jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
    llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
    multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas
    nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile
    nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13
    nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax
    opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy
    portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
    pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
    python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core
    scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
    sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
    tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
    transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel
    wrapt xarray xxhash yarl zipp
    """.split()
)


@dataclass(frozen=True)
class Wheel:
    """One distribution to ship: its pip requirement, its group (see the module docstring) and why it is needed."""

    name: str
    spec: str
    group: str
    why: str


# trl's spec is filled in from pyproject.toml (``trl_spec``); every other version is the one the CPU tests ran with.
WHEELS: list[Wheel] = [
    Wheel("trl", "", "required", "whileai-grpo[train]: GRPOTrainer"),
    Wheel("datasets", "==5.2.0", "required", "whileai-grpo[train], trl"),
    Wheel("dill", "==0.4.1", "required", "datasets"),
    Wheel("multiprocess", "==0.70.19", "required", "datasets"),
    Wheel("pydantic", "==2.13.4", "required", "whileai (recipes)"),
    Wheel("pydantic-core", "==2.46.4", "required", "pydantic"),
    Wheel("annotated-types", "==0.7.0", "required", "pydantic"),
    Wheel("typing-inspection", "==0.4.2", "required", "pydantic"),
    Wheel("verl", "==0.9.1", "bench", "benchmarks/bench_advantages.py: verl's estimators side by side"),
    Wheel("openrlhf", "==0.11.2", "bench", "benchmarks/bench_advantages.py: OpenRLHF's GAE side by side"),
    Wheel("typing-extensions", "==4.16.0", "fallback", "pydantic needs typing-extensions>=4.14.1"),
    Wheel("fsspec", "==2026.9.0", "fallback", "datasets needs fsspec<=2026.9.0"),
]


def normalize(name: str) -> str:
    """A distribution name as pip compares it (PEP 503)."""
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def trl_spec(pyproject: Path = REPO / "pyproject.toml") -> str:
    """trl's version range in whileai's ``train`` extra, e.g. ``>=1.16,<2``."""
    import tomllib
    from packaging.requirements import Requirement

    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    for line in extras["train"]:
        requirement = Requirement(line)
        if normalize(requirement.name) == "trl":
            return str(requirement.specifier)
    raise SystemExit("pyproject.toml's train extra names no trl")


def wheel_list(pyproject: Path = REPO / "pyproject.toml") -> list[Wheel]:
    """``WHEELS`` with trl's range from ``pyproject.toml``."""
    spec = trl_spec(pyproject)
    return [Wheel(w.name, spec, w.group, w.why) if w.name == "trl" else w for w in WHEELS]


def target_tags() -> set[object]:
    """Every wheel tag the target interpreter accepts."""
    from packaging import tags

    cpython = tags.cpython_tags(python_version=PYTHON, abis=["cp312"], platforms=PLATFORMS)
    generic = tags.compatible_tags(python_version=PYTHON, interpreter="cp312", platforms=PLATFORMS)
    return set(cpython) | set(generic)


def wheel_metadata(path: Path) -> tuple[str, str, list[str]]:
    """(name, version, Requires-Dist lines) read from a wheel's ``METADATA``."""
    with zipfile.ZipFile(path) as archive:
        member = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(member).decode("utf-8"))
    return message["Name"], message["Version"], message.get_all("Requires-Dist") or []


def target_requirements(lines: list[str]) -> list[object]:
    """The requirements that apply on the target machine with no extra asked for."""
    from packaging.requirements import Requirement

    kept = []
    for line in lines:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate(TARGET_ENV):
            kept.append(requirement)
    return kept


def check_folder(folder: Path = WHEEL_DIR, wheels: list[Wheel] | None = None) -> dict[str, object]:
    """Check a wheel folder without the network.

    Returns a report: ``ok``; ``missing`` (distributions with no wheel), ``duplicates`` (more than one),
    ``unfit`` (a wheel the target cannot install), ``wrong_version`` (a wheel outside its spec), ``unmet`` (a
    requirement of a ``required`` wheel that neither the folder nor the image provides, or that the folder's
    version does not meet), ``left_to_image`` (requirements the image must meet, with their bounds), ``bad_hash``
    (a wheel whose sha256 differs from the manifest), ``total_bytes``.
    """
    from packaging.specifiers import SpecifierSet
    from packaging.utils import parse_wheel_filename

    wheels = wheel_list() if wheels is None else wheels
    accepted = target_tags()
    found: dict[str, list[tuple[Path, str]]] = {}
    unfit = []
    for path in sorted(folder.glob("*.whl")):
        name, version, _, tags = parse_wheel_filename(path.name)
        found.setdefault(normalize(name), []).append((path, str(version)))
        if not set(tags) & accepted:
            unfit.append(path.name)
    missing = [w.name for w in wheels if normalize(w.name) not in found]
    duplicates = {name: [p.name for p, _ in files] for name, files in found.items() if len(files) > 1}
    wrong_version = []
    for w in wheels:
        for path, version in found.get(normalize(w.name), []):
            if w.spec and version not in SpecifierSet(w.spec):
                wrong_version.append(f"{path.name} is not {w.name}{w.spec}")
    versions = {name: files[0][1] for name, files in found.items()}
    unmet: list[str] = []
    left_to_image: dict[str, set[str]] = {}
    # The closure is checked for the required group; the bench wheels' own requirements (Ray, DeepSpeed, ...) are
    # never installed: bench_advantages.py stubs the modules their measured files import.
    shipped = {normalize(w.name) for w in wheels if w.group == "required"}
    for name, files in found.items():
        if name not in shipped:
            continue
        for requirement in target_requirements(wheel_metadata(files[0][0])[2]):
            needed = normalize(requirement.name)
            if needed in versions and needed in shipped:
                if versions[needed] not in requirement.specifier:
                    unmet.append(f"{name} needs {requirement}, the folder has {versions[needed]}")
            elif needed in IMAGE_PACKAGES:
                left_to_image.setdefault(needed, set()).add(f"{name}: {requirement.specifier or 'any'}")
            else:
                unmet.append(f"{name} needs {requirement}: neither in the folder nor in the image")
    manifest = folder / MANIFEST
    bad_hash = []
    if manifest.is_file():
        for entry in json.loads(manifest.read_text())["wheels"]:
            path = folder / entry["file"]
            if path.is_file() and _sha256(path) != entry["sha256"]:
                bad_hash.append(entry["file"])
    total = sum(p.stat().st_size for p in folder.glob("*.whl"))
    ok = not (missing or duplicates or unfit or wrong_version or unmet or bad_hash) and total <= WHEEL_BUDGET
    return {
        "ok": ok,
        "folder": str(folder),
        "missing": missing,
        "duplicates": duplicates,
        "unfit": unfit,
        "wrong_version": wrong_version,
        "unmet": unmet,
        "bad_hash": bad_hash,
        "left_to_image": {k: sorted(v) for k, v in sorted(left_to_image.items())},
        "total_bytes": total,
        "budget_bytes": WHEEL_BUDGET,
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def download(folder: Path = WHEEL_DIR) -> dict[str, object]:
    """Download one wheel per entry of ``wheel_list()`` into ``folder`` (emptied of wheels first); return the
    manifest it writes."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):
        old.unlink()
    platform_args = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    entries = []
    for w in wheel_list():
        with tempfile.TemporaryDirectory() as scratch:
            command = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--implementation",
                "cp",
                "--abi",
                "cp312",
                *platform_args,
                "--dest",
                scratch,
                f"{w.name}{w.spec}",
            ]
            subprocess.run(command, check=True)
            (path,) = Path(scratch).glob("*.whl")
            target = folder / path.name
            target.write_bytes(path.read_bytes())
        name, version, _ = wheel_metadata(target)
        size = target.stat().st_size
        entries.append(
            {
                "name": name,
                "version": version,
                "group": w.group,
                "spec": f"{w.name}{w.spec}",
                "why": w.why,
                "file": target.name,
                "bytes": size,
                "sha256": _sha256(target),
            }
        )
        print(f"{target.name:70s} {size / 2**20:6.2f} MiB  ({w.group})")
    manifest = {
        "target": {"python": "3.12", "implementation": "cp", "abi": "cp312", "platforms": PLATFORMS},
        "trl_spec": trl_spec(),
        "wheels": entries,
        "total_bytes": sum(e["bytes"] for e in entries),
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="check the folder, no network")
    parser.add_argument("--dir", type=Path, default=WHEEL_DIR, help=f"the wheel folder (default {WHEEL_DIR})")
    args = parser.parse_args(argv)
    if not args.check:
        manifest = download(args.dir)
        total = manifest["total_bytes"]
        print(f"total {total / 2**20:.2f} MiB in {len(manifest['wheels'])} wheels ", end="")
        print(f"(budget {WHEEL_BUDGET / 2**20:.0f} MiB of the {TRAVEL_LIMIT / 2**20:.0f} MiB that travel)")
    report = check_folder(args.dir)
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
