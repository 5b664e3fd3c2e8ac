"""`python benchmarks/bench_reward.py --quick` runs and prints its table and verdicts (docs/benchmarks.md quotes a
full run)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import child_processes
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_reward_benchmark_prints_its_table_and_verdicts() -> None:
    done = child_processes.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_reward.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "512 completions in 64 groups of 8" in out
    number = r"\d+\.\d+"
    for name in ("chat messages", "plain text"):  # verifier, grader, full, wall, bookkeeping, per completion, share
        assert re.search(rf"^{name}\s+" + r"\s+".join([number] * 6) + rf"\s+{number}%$", out, re.MULTILINE), out
        verdicts = re.search(
            rf"^{name}: bookkeeping ({number}) us per completion \(target <= 1 us: (met|NOT met)\); "
            rf"whileai overhead \(full - verifier\) ({number}) ms = ({number})% of a 40 ms step, assumed, not measured "
            r"\(target <= 5%: (met|NOT met)\)$",
            out,
            re.MULTILINE,
        )
        assert verdicts, out
        assert float(verdicts.group(1)) > 0 and float(verdicts.group(3)) > 0
    assert re.search(rf"rendering the conversations to text: {number} ms \({number} us/completion", out)
