"""``whileai env``: the versions and the machine a bug report needs, as ``trl env`` prints them."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from typing import Annotated, Any

import typer

from whileai.cli.console import guarded, out, print_json
from whileai.errors import DISTRIBUTION

# What a report about whileai needs: the trainers and servers it meets, and the libraries its transport and
# recipes stand on.
PACKAGES = (
    DISTRIBUTION,
    "torch",
    "transformers",
    "trl",
    "accelerate",
    "datasets",
    "peft",
    "vllm",
    "verl",
    "ray",
    "aiohttp",
    "pydantic",
    "typer",
    "numba",
    "orjson",
    "pyarrow",
    "llama_cpp_python",
)


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _accelerator() -> str:
    """What torch sees (it is imported only when installed): CUDA devices with their names, MPS, or the CPU."""
    if _version("torch") is None:
        return "none seen (torch not installed)"
    try:
        import torch
    except Exception as exc:  # a broken torch install is itself what the report needs to say
        return f"torch does not import: {type(exc).__name__}: {exc}"
    if torch.cuda.is_available():
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        return f"CUDA {torch.version.cuda}: {torch.cuda.device_count()} device(s) ({names})"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "MPS (Apple)"
    return "CPU only"


def environment() -> dict[str, Any]:
    """The figures ``whileai env`` prints."""
    return {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "accelerator": _accelerator(),
        "packages": {name: _version(name) for name in PACKAGES},
    }


@guarded
def env(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the lines.")] = False,
) -> None:
    """Print the versions and the machine a bug report needs (paste them into the issue).

    Example: whileai env

    Exit codes: 0 printed; 130 interrupted (Ctrl-C).
    """
    found = environment()
    if as_json:
        print_json(found)
        return
    out.print(f"- platform: {found['platform']}", markup=False)
    out.print(f"- python: {found['python']} ({found['cpus']} CPUs)", markup=False)
    out.print(f"- accelerator: {found['accelerator']}", markup=False)
    for name, version in found["packages"].items():
        out.print(f"- {name}: {version or 'not installed'}", markup=False)
