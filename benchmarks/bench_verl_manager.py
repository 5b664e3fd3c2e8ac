"""Is one reward worker enough? verl's naive reward manager against whileai's, side by side, on one batch.

whileai's manager needs ``reward.num_workers=1`` (verl sends each response to a reward worker picked at random, and a
group must meet in one). This times what that one worker does per response: verl's ``RewardLoopWorker`` scoring a
batch response by response, concurrently, as its reward loop does, once with ``reward.reward_manager.name=naive`` and
once with ``whileai`` (decode, verifier, the wait for the group, grading by the scripted rule, the log). Run in the
verl environment (``bash .ci/verl`` makes it)::

    .venv-verl/bin/python benchmarks/bench_verl_manager.py --groups 512 --n 8
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests" / "verl" / "test_reward_manager.py"


def _test_helpers():
    """The verl tests' batch, config and tokenizer builders (one definition of verl's rows)."""
    spec = importlib.util.spec_from_file_location("verl_test_helpers", TESTS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=512)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    helpers = _test_helpers()
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)

        (root / "tokenizer").mkdir()
        tokenizer_dir = helpers.build_tokenizer(root / "tokenizer")
        texts = [helpers.SHORT, helpers.LONG, helpers.LONGER, helpers.FAIL, helpers.HACK, helpers.SHORT]
        groups = [
            (f"task-{k % 8} refund order ORD-17", [texts[(k + j) % 6] for j in range(args.n)])
            for k in range(args.groups)
        ]
        data = helpers.make_batch(tokenizer_dir, groups)
        rows = len(data)

        def timed(name: str) -> float:
            folder = root / f"{name}-{time.perf_counter_ns()}"
            folder.mkdir()
            helpers._recipe(folder)
            config = helpers.verl_config(folder, tokenizer_dir, args.n, f"reward.reward_manager.name={name}")

            async def score() -> tuple[list[dict], float]:
                worker = RewardLoopWorker(config)  # in its event loop, as a Ray actor builds it; not timed
                start = time.perf_counter()
                outputs = await asyncio.gather(*(worker.compute_score(data[i : i + 1]) for i in range(rows)))
                return outputs, time.perf_counter() - start

            outputs, seconds = asyncio.run(score())
            assert len(outputs) == rows
            return seconds

        results = {name: [timed(name) for _ in range(args.repeats)] for name in ("naive", "whileai")}
    naive, whileai = (statistics.median(results[k]) for k in ("naive", "whileai"))
    print(f"{rows:,} responses in {args.groups:,} groups of {args.n}, one RewardLoopWorker, median of {args.repeats}")
    print(f"{'manager':<10}{'seconds':>10}{'responses/s':>14}{'vs naive':>10}")
    for name, seconds in (("naive", naive), ("whileai", whileai)):
        print(f"{name:<10}{seconds:>10.2f}{rows / seconds:>14,.0f}{seconds / naive:>9.2f}x")


if __name__ == "__main__":
    main()
