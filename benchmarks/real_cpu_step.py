"""What a GRPO step of a real 0.5B policy costs on this CPU: full fine-tuning against LoRA, float32 against bfloat16.

Trains ``recipes/real_cpu_word_problems_binary.yaml`` (Qwen2.5-Coder-0.5B-Instruct dequantised, 16 completions of at
most 160 tokens a step, no grader, so no gate) for ``--steps`` steps in each setting, side by side in one run, each
``whileai train`` in its own process group with ``/usr/bin/time`` around it:

- full fine-tuning in float32 (every weight and its AdamW state; what ``recipes/real_cpu_agent_gar.yaml`` does),
- LoRA adapters (rank 16 on every linear layer) over the float32 model,
- LoRA adapters over the bfloat16 model (the word-problem recipes as shipped).

Per setting: TRL's ``step_time`` (generation and the update, the first step left out as warm-up when there are more),
the tokens a step processed (TRL's ``num_tokens``, prompts and completions), the time per thousand tokens and its
ratio to full fine-tuning's, and the peak resident memory of the process. The settings sample different
completions, and generation runs until the longest of a batch ends, so neither the step time nor the time per token
compares them exactly: read differences within a few tens of percent as none.

    python benchmarks/real_cpu_step.py              # about 30 minutes on 2 cores
    python benchmarks/real_cpu_step.py --steps 1    # quicker
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from processes import run_in_group  # the runner that ends a command's process group on every way out

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "real_cpu_word_problems_binary.yaml"
SETTINGS = {
    "full fine-tuning, float32": ["model.dtype=float32", "model.lora=null"],
    "LoRA, float32": ["model.dtype=float32"],
    "LoRA, bfloat16": [],
}


def measure(name: str, overrides: list[str], steps: int, folder: Path) -> dict[str, Any]:
    """One setting's step time, tokens a step and peak memory (or why it did not finish, and its peak)."""
    command = [
        "/usr/bin/time", "-f", "peak-rss-kb %M",
        sys.executable, "-m", "whileai.cli.main", "train", str(RECIPE), *overrides,
        f"trainer.max_steps={steps}", f"trainer.save_steps={steps + 1}", f"output_dir={folder}",
    ]  # fmt: skip
    finished = run_in_group(command, timeout_s=3600)
    peak_kb = int(finished.stderr.rsplit("peak-rss-kb", 1)[1].split()[0]) if "peak-rss-kb" in finished.stderr else 0
    if finished.returncode != 0:  # said in the table (a setting killed for memory is a result), the others go on
        print(f"{name}: whileai train exited {finished.returncode}:\n{finished.stderr[-2000:]}", file=sys.stderr)
        why = "killed (signal 9: out of memory?)" if "signal 9" in finished.stderr else f"exit {finished.returncode}"
        return {"error": why, "peak_gb": peak_kb / 1024 / 1024}
    history = json.loads((folder / "trainer_state.json").read_text())["log_history"]
    logged = [row for row in history if "step_time" in row]
    # TRL's num_tokens counts every token seen so far (prompts and completions): a step's is the difference
    seen = [0.0] + [row["num_tokens"] for row in logged]
    tokens = [after - before for before, after in itertools.pairwise(seen)]
    seconds = [row["step_time"] for row in logged]
    if len(logged) > 1:  # the first step warms up
        tokens, seconds = tokens[1:], seconds[1:]
    return {
        "step_s": statistics.median(seconds),
        "tokens": statistics.median(tokens),
        "s_per_1k_tokens": statistics.median(s / t * 1000 for s, t in zip(seconds, tokens, strict=True)),
        "peak_gb": peak_kb / 1024 / 1024,
        "steps_timed": len(seconds),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
        help="one more recipe override for every setting, e.g. model.name_or_path=DIR (repeatable)",
    )  # fmt: skip
    options = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="whileai-step-") as scratch:
        for index, (name, overrides) in enumerate(SETTINGS.items()):
            results[name] = measure(name, [*options.extra, *overrides], options.steps, Path(scratch) / f"run-{index}")
            print(f"{name}: {results[name]}", file=sys.stderr, flush=True)
    base = results["full fine-tuning, float32"].get("s_per_1k_tokens")
    print("| setting | step s | tokens a step | s per 1k tokens | vs full float32 | peak GB | steps timed |")
    print("|---|---|---|---|---|---|---|")
    for name, row in results.items():
        if "error" in row:
            print(f"| {name} | {row['error']} | | | | {row['peak_gb']:.1f} | 0 |")
            continue
        ratio = f"{row['s_per_1k_tokens'] / base:.2f}x" if base else "-"
        print(
            f"| {name} | {row['step_s']:.0f} | {row['tokens']:.0f} | {row['s_per_1k_tokens']:.1f} | {ratio} | "
            f"{row['peak_gb']:.1f} | {row['steps_timed']} |"
        )
    return 1 if any("error" in row for row in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
