"""Benchmark: one ``trl_reward`` batch of 64 mixed groups judged over HTTP, with the settings a user gets, quiet and
beside a busy process; then concurrency 32, serial, and cached.

The judge is the test server of ``tests/judge_server.py`` in its own process, answering every call after 200 ms
(``--delay``), as a stand-in for a model server's latency. Measured side by side in one run, median of the repeats,
each batch after one unmeasured batch on the same judge (a warm connection pool, as every training step after the
first has) unless it says cold:

- one call on its own (the unit the targets are stated in), in each condition;
- the batch with ``JudgeConfig``'s defaults (concurrency asked of the server, which says it has 256 slots as
  llama.cpp's ``/props`` does, so every call of the batch is in flight; the answer cache on, in a fresh folder so
  every call is a miss), warm and cold;
- the same beside a busy process: a subprocess spinning on one core (pinned there where the OS allows), started
  before and stopped after its rows;
- concurrency 32 (two waves of 32: the floor is 2x), serial (concurrency 1), and the batch again on the answer cache a
  first run filled: wall time and the HTTP calls the server saw.

Then the client's own CPU per call, against the same server answering at once, 2,000 calls with 64 in flight, side
by side: aiohttp alone (post, then ``json.loads``), and the judge's transport (aiohttp) on its own and inside
``EndpointClient.run`` (whileai's transport parses the body itself).
whileai's rows hold a 58-character key, so every reply is searched for pieces of it as at the boundary it is. CPU is
the whole client process's (every thread), medians of the repeats.

Targets: the default settings within 1.2x one call, quiet and beside the busy process; concurrency 32 within 3x and a
cached re-run that makes zero calls; the client at most 0.6 ms of CPU per call.

    python benchmarks/bench_judge.py                     # 64 groups of 4, 200 ms judge, median of 3
    python benchmarks/bench_judge.py --repeats 5 --delay 0.5
    python benchmarks/bench_judge.py --cpu-calls 500     # a quicker CPU table
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / "tests" / "judge_server.py"
BENCH_KEY_ENV = "WHILEAI_BENCH_JUDGE_KEY"
# A busy process that spins while the benchmark lives: killed with it, or orphaned by a SIGKILL of the benchmark.
# (The parent's pid comes as an argument: read in the child, it could already be init's.)
SPIN = "import os, sys\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    pass\n"


def start_server(delay: float) -> tuple[subprocess.Popen[str], str]:
    from whileai.defaults import JUDGE_CONCURRENCY

    # The server says it runs JUDGE_CONCURRENCY calls at once (llama.cpp's /props), as a GPU server does; the defaults
    # ask it (a server on this machine that says nothing would get one call at a time).
    command = [sys.executable, str(SERVER), "--delay", str(delay), "--parent", str(os.getpid())]
    command += ["--slots", str(JUDGE_CONCURRENCY)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    if not url.startswith("http://"):
        process.kill()
        raise SystemExit(f"the test server did not start: {url!r}")
    return process, url


def server_requests(url: str) -> int:
    with urllib.request.urlopen(f"{url}/requests", timeout=5) as response:
        return int(json.load(response)["requests"])


def make_batch(groups: int, size: int) -> tuple[list[str], list[str]]:
    """``groups`` mixed groups of ``size``: passes with 1..size-1 tool calls, one failure each."""
    prompts, completions = [], []
    for g in range(groups):
        for i in range(size):
            prompts.append(f"refund order ORD-{1000 + g}")
            if i == size - 1:
                completions.append(f"I could not find ORD-{1000 + g}.")
            else:
                completions.append("<tool_call>lookup</tool_call>" * (i + 1) + f" refunded ORD-{1000 + g}")
    return prompts, completions


def verifier(prompts, completions, **kwargs):
    return [1.0 if "refunded" in c else 0.0 for c in completions]


def run_batch(
    url: str,
    concurrency: int | None,
    cache_dir: str | None,
    groups: int,
    size: int,
    warm_pool: bool = True,
) -> dict[str, float]:
    """One measured batch; ``concurrency`` None keeps ``JudgeConfig``'s default, ``cache_dir`` None turns the answer
    cache off."""
    from whileai import GroupwiseGrading
    from whileai.judge import JudgeConfig, JudgeGrader

    settings: dict[str, Any] = {"base_url": url, "model": "bench-judge", "timeout_s": 30.0}
    if concurrency is not None:
        settings["concurrency"] = concurrency
    if cache_dir is None:
        settings["no_cache"] = True
    else:
        settings["cache_dir"] = cache_dir
    judge = JudgeGrader(JudgeConfig(**settings))
    try:
        # Start the loop and the connection pool outside the timed batch, as in training, where the first batch
        # pays it once per run.
        gar = GroupwiseGrading(grader=judge)
        reward = gar.trl_reward(verifier, num_generations=size)
        warm = [{"index": 0, "prompt": "warm-up", "completion": "x", "reward": 1.0, "passed": True}]
        judge.grade_groups([warm])
        if warm_pool:  # a batch before the measured one, as every training step after the first has had
            prompts, completions = make_batch(groups, size)
            reward(prompts=["warm " + p for p in prompts], completions=completions)
        prompts, completions = make_batch(groups, size)
        before, hits = server_requests(url), judge.stats.cache_hits
        start = time.perf_counter()
        shaped = reward(prompts=prompts, completions=completions)
        seconds = time.perf_counter() - start
        calls = server_requests(url) - before
        assert len(shaped) == groups * size and gar.stats.failed == 0, gar.stats
        return {"seconds": seconds, "calls": calls, "cache_hits": judge.stats.cache_hits - hits}
    finally:
        judge.close()


def start_spinner() -> subprocess.Popen[bytes]:
    """A process that keeps one core busy (pinned to the last core where the OS allows it)."""
    spinner = subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())])
    if hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(spinner.pid, {max(os.sched_getaffinity(0))})
        except OSError:
            pass
    time.sleep(0.5)  # let it reach its loop
    return spinner


def one_call(url: str, repeats: int) -> float:
    from whileai.judge import JudgeConfig, JudgeGrader

    judge = JudgeGrader(JudgeConfig(base_url=url, model="bench-judge", no_cache=True))
    try:
        group = [
            {
                "index": 0,
                "prompt": "p",
                "completion": "<tool_call>a</tool_call> refunded",
                "reward": 1.0,
                "passed": True,
            },
            {"index": 1, "prompt": "p", "completion": "no", "reward": 0.0, "passed": False},
        ]
        judge(group)  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            judge(group)
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    finally:
        judge.close()


def client_cpu(url: str, calls: int, in_flight: int, repeats: int) -> list[tuple[str, float, float]]:
    """(transport, client CPU ms per call, wall s) for each transport, ``calls`` calls with ``in_flight`` at once
    against ``url`` (a server answering at once), the median of ``repeats`` after a warm-up batch."""
    import asyncio

    from whileai.http.client import EndpointClient
    from whileai.http.endpoint import Call, EndpointSettings, first_choice
    from whileai.http.secrets import SecretFilter
    from whileai.http.transport import Transport

    # A real key's length, so that every reply is searched for its pieces as a hosted judge's would be.
    key = "sk-" + "".join(random.Random(0).choices(string.ascii_letters + string.digits, k=55))
    os.environ[BENCH_KEY_ENV] = key
    settings = EndpointSettings(
        base_url=url,
        model="bench-judge",
        concurrency=in_flight,
        timeout_s=60.0,
        stream=False,
        api_key_env=BENCH_KEY_ENV,
    )  # whole answers: the transports compared read the same bodies
    request = settings.chat_request([{"role": "user", "content": "rank these rollouts " * 20}])

    secrets = SecretFilter([key])

    class BareAiohttp:
        """aiohttp alone: one session, post, read the text; no proxy, redirect, size limit or secret filter."""

        def __init__(self) -> None:
            import aiohttp

            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=in_flight))

        async def post(self, path: str, body: dict[str, Any]) -> str:
            async with self.session.post(url + path, json=body, headers={"Authorization": f"Bearer {key}"}) as reply:
                return await reply.text()

        async def close(self) -> None:
            await self.session.close()

    async def loop_of(make: Any) -> tuple[float, float]:
        transport = make()
        semaphore = asyncio.Semaphore(in_flight)

        async def one() -> None:
            async with semaphore:
                reply = await transport.post("/chat/completions", request)
                if not isinstance(reply, dict):  # aiohttp alone hands back the body's text
                    json.loads(reply)

        try:
            await asyncio.gather(*(one() for _ in range(in_flight)))  # the pool warm
            measured = []
            for _ in range(repeats):
                cpu, wall = time.process_time(), time.perf_counter()
                await asyncio.gather(*(one() for _ in range(calls)))
                measured.append((time.process_time() - cpu, time.perf_counter() - wall))
            return statistics.median(m[0] for m in measured), statistics.median(m[1] for m in measured)
        finally:
            await transport.close()

    def whole_client() -> tuple[float, float]:
        client = EndpointClient(settings)
        call = Call(body=lambda: request, read=lambda response: first_choice(response)["message"]["content"])
        try:
            client.run([call] * in_flight)
            measured = []
            for _ in range(repeats):
                cpu, wall = time.process_time(), time.perf_counter()
                outcomes = client.run([call] * calls)
                measured.append((time.process_time() - cpu, time.perf_counter() - wall))
                assert all(o.error is None for o in outcomes), next(o.error for o in outcomes if o.error)
            return statistics.median(m[0] for m in measured), statistics.median(m[1] for m in measured)
        finally:
            client.close()

    runs = [
        ("aiohttp alone", asyncio.run(loop_of(BareAiohttp))),
        ("whileai: aiohttp", asyncio.run(loop_of(lambda: Transport(url, f"Bearer {key}", secrets, 60.0)))),
        ("whileai: EndpointClient.run", whole_client()),
    ]
    return [(label, cpu * 1000 / calls, wall) for label, (cpu, wall) in runs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=64, help="mixed groups in the batch")
    parser.add_argument("--size", type=int, default=4, help="rollouts per group (num_generations)")
    parser.add_argument("--delay", type=float, default=0.2, help="seconds the judge takes per call")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of each concurrent measurement (median)")
    parser.add_argument("--serial-repeats", type=int, default=1, help="repeats of the serial run (slow)")
    parser.add_argument("--cpu-calls", type=int, default=2000, help="calls of the client CPU table (0: no table)")
    args = parser.parse_args()

    process, url = start_server(args.delay)
    rows: list[tuple[str, float, float, float, float]] = []  # label, seconds, one call, HTTP calls, cache hits
    try:

        def measure(
            label: str,
            single: float,
            concurrency: int | None,
            repeats: int,
            warm_pool: bool = True,
            cache: bool = False,
        ) -> None:
            runs = []
            for _ in range(repeats):
                with tempfile.TemporaryDirectory() as folder:
                    cache_dir = folder if cache else None
                    runs.append(run_batch(url, concurrency, cache_dir, args.groups, args.size, warm_pool))
            seconds = statistics.median(r["seconds"] for r in runs)
            rows.append((label, seconds, single, statistics.median(r["calls"] for r in runs), 0))

        quiet = one_call(url, max(5, args.repeats))
        measure("default settings", quiet, None, args.repeats, cache=True)
        measure("default settings, cold pool", quiet, None, args.repeats, warm_pool=False, cache=True)
        spinner = start_spinner()
        try:
            busy = one_call(url, max(5, args.repeats))
            measure("default settings, busy process", busy, None, args.repeats, cache=True)
            measure("concurrency 32, busy process", busy, 32, args.repeats)
        finally:
            spinner.kill()
            spinner.wait(10)
        measure("concurrency 32", quiet, 32, args.repeats)
        measure("serial (concurrency 1)", quiet, 1, args.serial_repeats)

        cached = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as folder:
                run_batch(url, None, folder, args.groups, args.size, warm_pool=False)  # fills the cache
                cached.append(run_batch(url, None, folder, args.groups, args.size, warm_pool=False))
        rows.append(
            (
                "cached re-run",
                statistics.median(r["seconds"] for r in cached),
                quiet,
                max(r["calls"] for r in cached),
                statistics.median(r["cache_hits"] for r in cached),
            )
        )
    finally:
        process.terminate()
        process.wait(10)
    cpu_rows: list[tuple[str, float, float]] = []
    if args.cpu_calls:
        process, url = start_server(0.0)
        try:
            cpu_rows = client_cpu(url, args.cpu_calls, 64, args.repeats)
        finally:
            process.terminate()
            process.wait(10)

    from whileai.defaults import JUDGE_CONCURRENCY

    serial = next(r[1] for r in rows if r[0].startswith("serial"))
    print(
        f"one trl_reward batch: {args.groups} mixed groups of {args.size}, judge answering in "
        f"{args.delay * 1000:.0f} ms; one call {quiet * 1000:.0f} ms quiet, {busy * 1000:.0f} ms beside a busy process "
        f"(medians); default concurrency {JUDGE_CONCURRENCY}; median of {args.repeats}"
    )
    print(f"{'run':<34}{'wall s':>9}{'x one call':>12}{'vs serial':>11}{'HTTP calls':>12}{'cache hits':>12}")
    for label, seconds, single, calls, hits in rows:
        print(
            f"{label:<34}{seconds:>9.3f}{seconds / single:>11.2f}x{serial / seconds:>10.1f}x"
            f"{int(calls):>12}{int(hits):>12}"
        )

    def ratio(label: str) -> float:
        row = next(r for r in rows if r[0] == label)
        return row[1] / row[2]

    default, loaded, c32 = ratio("default settings"), ratio("default settings, busy process"), ratio("concurrency 32")
    cache = rows[-1]
    print(
        f"target: default settings within 1.2x one call: {'met' if default <= 1.2 else 'NOT met'} "
        f"({default:.2f}x); beside a busy process: {'met' if loaded <= 1.2 else 'NOT met'} ({loaded:.2f}x)"
    )
    print(
        f"target: concurrency 32 within 3x one call: {'met' if c32 <= 3 else 'NOT met'} ({c32:.2f}x); "
        f"cached re-run makes zero calls: {'met' if cache[3] == 0 else 'NOT met'}"
    )
    if cpu_rows:
        print()
        print(f"client CPU per call: {args.cpu_calls} calls, 64 in flight, a server answering at once; median of "
              f"{args.repeats}")  # fmt: skip
        ours = cpu_rows[0][1]
        print(f"{'transport':<30}{'CPU ms/call':>13}{'wall s':>9}{'vs aiohttp':>12}")
        for label, per_call, wall in cpu_rows:
            print(f"{label:<30}{per_call:>13.3f}{wall:>9.2f}{per_call / ours:>11.2f}x")
        whole = next(cpu for label, cpu, _ in cpu_rows if label == "whileai: EndpointClient.run")
        print(f"target: the client at most 0.6 ms of CPU per call: {'met' if whole <= 0.6 else 'NOT met'} "
              f"({whole:.3f} ms through EndpointClient.run)")  # fmt: skip


if __name__ == "__main__":
    main()
