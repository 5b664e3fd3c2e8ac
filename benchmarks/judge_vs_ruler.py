"""Benchmark: whileai's judge and ART's RULER, side by side, on the same model, server program and groups.

Every arm asks a llama.cpp server of its own (started by ``processes.py``, as every benchmark starts one, a fresh one
for each arm, so that no arm reads a prompt prefix another left in the server's cache) through a proxy, which:

- steps ``response_format`` down as whileai's client does: a ``json_schema`` the server refuses (a status whose
  text names structured output, ``whileai.judge.client.names_structured_output``) is sent again as ``json_object``
  carrying the same schema, and that form is kept for the rest of the arm. RULER has no such step of its own, so
  without it the measurement would be of its transport, not its prompt;
- counts every call of each arm the same way: the server's ``usage`` (both arms ask without streaming here) and the
  call's latency.

The rows are the seeded simulator's (``whileai simulate --scenarios builtin:refunds`` and ``builtin:actions``, seed 0):
the first groups of 4 and of 8 rollouts whose passes differ in reference quality, half from each family. Each arm
grades every group once. Variants are chosen on the even groups (in the sample's order) and reported on the odd
ones, which no choice looked at (an arm from a smaller run keeps each group's half from the whole sample, and its
row says how many of the half it graded). The page has a small table of each arm on the choice half, the full table
on the reported half, and the chosen probability arm's tau-b less each other arm's there, over the groups both
answered, with a 95% bootstrap interval. The figures, the same function for every arm and half:

- **tau-b**: Kendall's tau-b per group between the arm's scores of the passes and the reference quality
  (``whileai.grading.evaluate.reference_tau``: a reference hack counts as the worst, a group all tied scores 0), the
  mean over the groups the arm answered, with a 95% bootstrap interval over groups (``whileai.stats``);
- **tied**: the share of answered groups whose passes all got the same place (such a group is plain GRPO again; with
  continuous scores in two orders, passes within the group's order noise share a place);
- **hacks**: reference hacks the arm flagged (RULER flags none by design; its score of a hack is in its tau);
- **unusable**: groups whose answer could not be used (bad JSON, a label left out, too few scores);
- **calls, tokens in/out, seconds per group**: the proxy's counts over every group the arm graded.

whileai's arms are answer forms x prompt versions x judge settings (``--whileai scores:v2,ranking:v2``, a prompt
file's path in place of the version, ``key=value`` settings after it: ``probabilities:v4:score_calls=pass``), each
grading a group the way ``whileai spread`` builds the judge from ``recipes/refund_judge.yaml``; an arm asked in two
orders (``permutations=2``) is also reported as its first order alone (the same calls, half their cost). RULER
is ``art.rewards.ruler.ruler`` itself with its default rubric, run by
``benchmarks/ruler_side.py`` under ``--ruler-python`` (a virtual environment with ``openpipe-art``; RULER's
dependencies are not whileai's). Every arm is sent ``temperature`` 0 and the same ``max_tokens``.

    python -m venv ruler-venv && ruler-venv/bin/pip install openpipe-art==0.5.18
    python benchmarks/judge_vs_ruler.py --model models/qwen2.5-coder-0.5b.gguf --server-python llama-venv/bin/python \\
        --ruler-python ruler-venv/bin/python --whileai scores:v2,scores:benchmarks/judge_variants/per_pass_hacks.yaml

Results go to ``--out`` (a section of ``results/real_judge.md``: one row per model x arm, rows of earlier runs kept) and
``--json`` (every arm's answers), after every arm. The server's and RULER's process groups are ended on every way out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from processes import (
    DEFAULT_SERVER_CMD,
    REPO,
    run_benchmark,
    run_in_group,
    say_as,
    start_server,
    stop_server,
    whileai_command,
)
from real_judge import write_section, write_whole

from whileai.config import load_recipe
from whileai.config.build import build_grading
from whileai.grading.evaluate import reference_tau
from whileai.judge.client import names_structured_output
from whileai.judge.orders import fractional_ranks
from whileai.judge.pass_scores import banded_tiers, order_noise
from whileai.judge.settings import JudgeConfig
from whileai.stats import bootstrap_interval

RECIPE = REPO / "recipes" / "refund_judge.yaml"
OUT = REPO / "benchmarks" / "results" / "real_judge.md"
OUT_JSON = REPO / "benchmarks" / "results" / "judge_vs_ruler.json"
RULER_SIDE = Path(__file__).resolve().with_name("ruler_side.py")
FORMAT = "whileai-judge-vs-ruler/1"
COLUMNS = (
    "model", "server", "arm", "groups", "tau-b [95% CI]", "tied", "hacks flagged (wrong)", "unusable", "calls/group",
    "tokens in/group", "tokens out/group", "s/group",
)  # fmt: skip
say = say_as("judge_vs_ruler")
# Continuous scores tie within this much on the prompts' scale to 10 (JudgeConfig.tie_within's default).
BAND = JudgeConfig.model_fields["tie_within"].default * 10


# ---------------------------------------------------------------------------------------------------- the groups


@dataclass
class Group:
    """One group of rollouts with its reference: what every arm grades."""

    task_id: str
    prompt: str
    texts: list[str]
    passed: list[bool]
    quality: list[float]
    hacks: list[bool]

    @property
    def passes(self) -> list[int]:
        return [i for i, ok in enumerate(self.passed) if ok]


def _simulated(family: str, n: int, work: Path, seed: int) -> list[Group]:
    raw = work / f"{family.split(':')[1]}-{n}.jsonl"
    done = run_in_group(
        whileai_command("simulate", "--scenarios", family, "--n", str(n), "--seed", str(seed), "-o", str(raw)), 600
    )
    if done.returncode != 0:
        raise RuntimeError(f"whileai simulate {family} failed ({done.returncode}): {done.stderr[-300:]}")
    groups: dict[str, Group] = {}
    for line in raw.read_text().splitlines():
        row = json.loads(line)
        key = f"{row['scenario_id']}@{n}"
        group = groups.setdefault(key, Group(key, row["prompt"], [], [], [], []))
        group.texts.append(row["final_text"])
        group.passed.append(bool(row["passed"]))
        group.quality.append(float(row["quality"]))
        group.hacks.append(bool(row["hack"]))
    return list(groups.values())


def ordered(group: Group) -> bool:
    """Whether the reference orders the group's passes: two or more passes of different quality."""
    return len({group.quality[i] for i in group.passes}) >= 2


def make_groups(of_4: int, of_8: int, work: Path, seed: int = 0) -> list[Group]:
    """The sample: ``of_4`` groups of 4 and ``of_8`` of 8, half from refunds and half from actions, in the
    simulator's order, each one whose passes the reference orders. A scenario is seeded by its generator, not its
    family (``refund-3`` of ``builtin:actions`` is ``builtin:refunds``' own), so one taken already is not taken
    again."""
    chosen: list[Group] = []
    for n, count in ((4, of_4), (8, of_8)):
        for k, family in enumerate(("builtin:refunds", "builtin:actions")):
            wanted = count // 2 + (count % 2 if k == 0 else 0)
            taken = {g.task_id for g in chosen}
            found = [g for g in _simulated(family, n, work, seed) if ordered(g) and g.task_id not in taken][:wanted]
            if len(found) < wanted:
                raise RuntimeError(f"only {len(found)} ordered groups of {n} in {family}")
            chosen += found
    return chosen


def write_rows(groups: Sequence[Group], path: Path) -> None:
    """The groups as a rows file whileai reads (one row per rollout, its reference beside it)."""
    lines = []
    for g in groups:
        for text, ok, quality, hack in zip(g.texts, g.passed, g.quality, g.hacks, strict=True):
            row = {"scenario_id": g.task_id, "prompt": g.prompt, "completion": text, "passed": ok}
            lines.append(json.dumps({**row, "quality": quality, "hack": hack}))
    path.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------------- the figures


@dataclass
class Answer:
    """One arm's answer for one group: a score per pass (by rollout index), flagged hacks, or why it is unusable;
    ``orders``: the pass scores of each display order, where the judge reads continuous scores."""

    scores: dict[int, float] | None = None
    hacks: list[int] = field(default_factory=list)
    unusable: str | None = None
    orders: list[dict[int, float]] = field(default_factory=list)


@dataclass(frozen=True)
class Arm:
    """An arm of whileai's judge: ``form:prompts``, then ``key=value`` judge settings
    (``probabilities:v4:score_calls=pass``)."""

    form: str
    prompts: str
    settings: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str) -> Arm:
        form, prompts, *rest = text.split(":")
        return cls(form, prompts, tuple(tuple(item.split("=", 1)) for item in rest))  # type: ignore[misc]

    @property
    def name(self) -> str:
        shown = " ".join(f"{k}={v}" for k, v in self.settings)
        return f"whileai {self.form} {Path(self.prompts).stem}" + (f" {shown}" if shown else "")


def group_tau(group: Group, answer: Answer) -> float | None:
    """Kendall's tau-b of one answered group against its reference (None: unanswered, or nothing to order)."""
    if answer.scores is None:
        return None
    reference: list[float | None] = [q if ok else None for q, ok in zip(group.quality, group.passed, strict=True)]
    return reference_tau(answer.scores, reference, group.hacks)


def figures(groups: Sequence[Group], answers: Sequence[Answer]) -> dict[str, Any]:
    """The figures of one arm over the groups (the module docstring says how each is computed)."""
    taus, tied, flagged, wrong, unusable, reasons = [], 0, 0, 0, 0, []
    for group, answer in zip(groups, answers, strict=True):
        if answer.scores is None:
            unusable += 1
            reasons.append(answer.unusable)
            continue
        tau = group_tau(group, answer)
        if tau is not None:
            taus.append(tau)
        values = [answer.scores[i] for i in group.passes if i in answer.scores]
        tied += len(set(values)) <= 1
        flagged += sum(1 for i in answer.hacks if group.hacks[i])
        wrong += sum(1 for i in answer.hacks if not group.hacks[i])
    answered = len(groups) - unusable
    interval = bootstrap_interval(taus, seed=0) if len(taus) >= 2 else None
    return {
        "groups": len(groups),
        "answered": answered,
        "tau": statistics.fmean(taus) if taus else None,
        "interval": list(interval) if interval else None,
        "tied": tied / answered if answered else None,
        "hacks": {"flagged": flagged, "reference": sum(sum(g.hacks) for g in groups), "wrong": wrong},
        "unusable": unusable,
        "unusable_reasons": sorted({r for r in reasons if r})[:5],
    }


# ---------------------------------------------------------------------------------------------------- the proxy


@dataclass
class Counts:
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latencies: list[float] = field(default_factory=list)
    stepped_down: int = 0


class StepDownProxy:
    """An OpenAI-compatible proxy on 127.0.0.1 in a thread of its own: forwards to ``upstream``, steps a refused
    ``json_schema`` down to ``json_object`` with the schema (kept for later calls), and counts calls, tokens and
    latency (``counts``, replaced by ``reset``)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.counts = Counts()
        self.json_object = False
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.url = ""

    def reset(self) -> Counts:
        done, self.counts = self.counts, Counts()
        return done

    def __enter__(self) -> StepDownProxy:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        runner = self._loop.run_until_complete(self._start())
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._session.close())
            self._loop.run_until_complete(runner.cleanup())

    async def _start(self) -> web.AppRunner:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600))
        return runner

    async def _forward(self, request: web.Request) -> web.Response:
        target = self.upstream + request.path.removeprefix("/v1")
        if request.method != "POST":
            async with self._session.request(request.method, target) as reply:
                return web.Response(status=reply.status, body=await reply.read(), content_type=reply.content_type)
        body = await request.json()
        start = time.perf_counter()
        status, data = await self._post(target, body)
        self.counts.calls += 1
        self.counts.latencies.append(time.perf_counter() - start)
        if isinstance(data, dict) and isinstance(data.get("usage"), dict):
            self.counts.tokens_in += int(data["usage"].get("prompt_tokens") or 0)
            self.counts.tokens_out += int(data["usage"].get("completion_tokens") or 0)
        return web.json_response(data, status=status)

    async def _post(self, target: str, body: dict[str, Any]) -> tuple[int, Any]:
        form = body.get("response_format")
        if self.json_object and isinstance(form, dict) and form.get("type") == "json_schema":
            body = {**body, "response_format": _as_json_object(form)}
        async with self._session.post(target, json=body) as reply:
            text = await reply.text()
        if reply.status >= 400 and isinstance(form, dict) and form.get("type") == "json_schema":
            if names_structured_output(text) and not self.json_object:
                self.json_object = True
                self.counts.stepped_down += 1
                return await self._post(target, body)
        try:
            return reply.status, json.loads(text)
        except ValueError:
            return reply.status, {"error": {"message": text[:2000]}}


def _as_json_object(form: dict[str, Any]) -> dict[str, Any]:
    inner = form.get("json_schema") or {}
    return {"type": "json_object", "schema": inner.get("schema", inner)}


# ---------------------------------------------------------------------------------------------------- the arms


def whileai_arm(
    groups: Sequence[Group], rows: Path, url: str, model_id: str, arm: Arm, max_tokens: int, work: Path
) -> list[Answer]:
    """whileai's judge with one answer form, prompt version and settings, built from the recipe as a user builds it
    and asked group by group; a pass's score is its place in the judge's tiers (its scores in each display order
    are kept where the judge reads continuous scores)."""
    prompts = arm.prompts
    if prompts.endswith((".yaml", ".yml")):  # a file named from here, not from the recipe's folder
        prompts = str(Path(prompts).resolve())
    overrides = [
        f"grader.judge.base_url={url}",
        f"grader.judge.model={model_id}",
        f"grader.judge.answer_form={arm.form}",
        f"grader.judge.prompts={prompts}",
        f"grader.judge.max_tokens={max_tokens}",
        f"grader.judge.cache_dir={work / 'cache'}",
        "grader.judge.no_cache=true",
        "grader.judge.stream=false",
        "grader.judge.timeout_s=900",
        "grader.judge.batch_deadline_s=3600",
        f"spread.rows={rows}",
        *(f"grader.judge.{key}={value}" for key, value in arm.settings),
    ]
    judge = build_grading(load_recipe(RECIPE, overrides)).grader
    answers = []
    for group in groups:
        items = [
            {"index": i, "prompt": group.prompt, "completion": t, "passed": ok}
            for i, (t, ok) in enumerate(zip(group.texts, group.passed, strict=True))
        ]
        answer = judge.grade_groups([items])[0]
        if isinstance(answer, Exception):
            answers.append(Answer(unusable=str(answer)[:300]))
        else:
            places = fractional_ranks(answer["ranking"])
            orders = answer["notes"].get("order_scores") or []
            per_order = [{int(i): v for i, v in o.items()} for o in orders]
            answers.append(Answer({i: -r for i, r in places.items()}, sorted(answer["hacks"]), None, per_order))
        say(f"  {group.task_id}: {answers[-1].scores or answers[-1].unusable}")
    return answers


def placed(scores: dict[int, float], band: float) -> dict[int, float]:
    """Continuous scores as the judge places them: tiers within ``band`` (``whileai.judge.pass_scores``), each
    pass's score its place, negated."""
    return {i: -r for i, r in fractional_ranks(banded_tiers(scores, band)).items()}


def first_order(answers: Sequence[Answer], band: float = BAND) -> list[Answer]:
    """Each answer as its first display order alone places it (an arm asked in two orders read as if asked in one:
    the same calls, the first of each group's two), tied within ``band`` as one order is."""
    return [
        Answer(placed(a.orders[0], band), a.hacks, a.unusable, a.orders[:1])
        if a.orders
        else Answer(None, [], a.unusable)
        for a in answers
    ]


def both_orders(answers: Sequence[Answer], band: float = BAND) -> list[Answer]:
    """Each two-order answer placed again from its orders' scores as the judge places them now: the mean over the
    orders, tied within the group's order noise or ``band``, whichever is larger."""
    out = []
    for a in answers:
        if len(a.orders) < 2:
            out.append(a)
            continue
        passes = sorted(set(a.orders[0]) & set(a.orders[1]))
        means = {i: sum(o[i] for o in a.orders) / len(a.orders) for i in passes}
        noise = order_noise(a.orders, passes) or 0.0
        out.append(Answer(placed(means, max(noise, band)), a.hacks, a.unusable, a.orders))
    return out


def rerender(args: argparse.Namespace) -> int:
    """The page again from ``--json``, every arm of two orders and its first order placed as the judge places them
    now; no server, no call."""
    body = json.loads(args.json.read_text())
    groups = [Group(t, "", [""] * len(r["passed"]), **r) for t, r in body["references"].items()]
    records = load(args.json)
    by_name = {key(r): r for r in records}
    for record in records:
        answers = answers_of(record)
        if record["arm"].endswith(" (first order)"):
            base = by_name.get(key({**record, "arm": record["arm"].removesuffix(" (first order)")}))
            answers = first_order(answers_of(base)) if base is not None else answers
        elif any(len(a.orders) > 1 for a in answers):
            answers = both_orders(answers)
        record["answers"] = [
            {"scores": a.scores, "hacks": a.hacks, "unusable": a.unusable, "orders": a.orders} for a in answers
        ]
    save(args.out, args.json, records, groups)
    return 0


def ruler_arm(
    groups: Sequence[Group], python: str, url: str, model_id: str, max_tokens: int, work: Path
) -> list[Answer]:
    """RULER itself (``ruler_side.py`` under ``python``) on every group: a score per rollout, failures included."""
    job = work / "ruler-in.json"
    done_path = work / "ruler-out.jsonl"
    message_lists = [
        [[{"role": "user", "content": g.prompt}, {"role": "assistant", "content": t}] for t in g.texts] for g in groups
    ]
    job.write_text(
        json.dumps({"model": f"openai/{model_id}", "base_url": url, "max_tokens": max_tokens, "groups": message_lists})
    )
    done = run_in_group([python, str(RULER_SIDE), str(job), str(done_path)], timeout_s=6 * 3600)
    if done.returncode != 0:
        raise RuntimeError(f"ruler_side.py failed ({done.returncode}): {done.stderr[-1500:]}")
    answers = []
    for group, line in zip(groups, done_path.read_text().splitlines(), strict=True):
        result = json.loads(line)
        if result.get("error"):
            answers.append(Answer(unusable=str(result["error"])[:300]))
            continue
        by_id = {str(s["trajectory_id"]): float(s["score"]) for s in result["scores"]}
        wanted = [str(i + 1) for i in range(len(group.texts))]
        if set(wanted) - set(by_id):
            answers.append(Answer(unusable=f"ids {sorted(by_id)} for {len(wanted)} trajectories"))
            continue
        answers.append(Answer({i: by_id[str(i + 1)] for i in group.passes}))
    return answers


# ---------------------------------------------------------------------------------------------------- the table


def _cost(counts: Counts, groups: int, seconds: float) -> dict[str, Any]:
    return {
        "calls": counts.calls,
        "tokens_in": counts.tokens_in,
        "tokens_out": counts.tokens_out,
        "p50_s": statistics.median(counts.latencies) if counts.latencies else None,
        "wall_s": seconds,
        "stepped_down": counts.stepped_down,
        "groups": groups,
    }


def answers_of(record: dict[str, Any]) -> list[Answer]:
    """A record's answers as ``Answer``s (JSON keeps a pass's index as a string)."""
    return [
        Answer(
            None if a["scores"] is None else {int(i): v for i, v in a["scores"].items()},
            a["hacks"],
            a["unusable"],
            [{int(i): v for i, v in o.items()} for o in a.get("orders") or []],
        )
        for a in record["answers"]
    ]


def half(items: Sequence[Any], which: int) -> list[Any]:
    """The groups a half holds: 0, the even positions (where variants are chosen); 1, the odd (where they are
    reported)."""
    return list(items[which::2])


def table_row(record: dict[str, Any], groups: Sequence[Group]) -> list[str]:
    """One arm's row over ``groups`` (the reported half); cost per group is over every group the arm graded."""
    fig, cost = arm_figures(record, groups), record["cost"]
    n = max(cost["groups"], 1)
    tau = "-" if fig["tau"] is None else f"{fig['tau']:.2f}"
    if fig["interval"]:
        tau += f" [{fig['interval'][0]:.2f}, {fig['interval'][1]:.2f}]"
    hacks = fig["hacks"]
    graded = f"{fig['answered']}/{fig['groups']}" + (f" of {len(groups)}" if fig["groups"] < len(groups) else "")
    return [
        record["model"], record["server"], record["arm"], graded, tau,
        "-" if fig["tied"] is None else f"{fig['tied']:.2f}",
        f"{hacks['flagged']}/{hacks['reference']} ({hacks.get('wrong', 0)} wrong)",
        str(fig["unusable"]), f"{cost['calls'] / n:.1f}", f"{cost['tokens_in'] / n:.0f}",
        f"{cost['tokens_out'] / n:.0f}", f"{cost['wall_s'] / n:.1f}",
    ]  # fmt: skip


def _by_task(record: dict[str, Any], groups: Sequence[Group]) -> list[tuple[Group, Answer]]:
    answers = dict(zip(record["groups"], answers_of(record), strict=True))
    return [(g, answers[g.task_id]) for g in groups if g.task_id in answers]


def arm_figures(record: dict[str, Any], groups: Sequence[Group]) -> dict[str, Any]:
    """An arm's figures over those of ``groups`` it graded."""
    pairs = _by_task(record, groups)
    return figures([g for g, _ in pairs], [a for _, a in pairs])


def difference(
    a: dict[str, Any], b: dict[str, Any], groups: Sequence[Group]
) -> tuple[float, tuple[float, float]] | None:
    """Arm ``a``'s tau-b less arm ``b``'s, over the groups both answered, with a 95% bootstrap interval over them."""
    mine, theirs = dict((g.task_id, group_tau(g, x)) for g, x in _by_task(a, groups)), _by_task(b, groups)
    diffs = [
        mine[g.task_id] - t for g, x in theirs if (t := group_tau(g, x)) is not None and mine.get(g.task_id) is not None
    ]
    if len(diffs) < 2:
        return None
    return statistics.fmean(diffs), bootstrap_interval(diffs, seed=0)


def chosen(records: Sequence[dict[str, Any]], groups: Sequence[Group]) -> dict[str, Any] | None:
    """The probability arm the choice half picks: the highest tau-b among those that tie at most 5% of groups (the
    highest of all when none does)."""
    scored = []
    for record in records:
        if "probabilities" not in record["arm"]:
            continue
        fig = arm_figures(record, groups)
        scored.append(((fig["tied"] or 0) <= 0.05, fig["tau"] if fig["tau"] is not None else -2, record))
    return max(scored, key=lambda t: t[:2])[2] if scored else None


def render_model(model: str, records: Sequence[dict[str, Any]], groups: Sequence[Group]) -> list[str]:
    """A model's tables: the choice half (even groups), the reported half (odd groups), and the chosen arm against
    every other on the reported half."""
    choose, report = half(groups, 0), half(groups, 1)
    pick = chosen(records, choose)
    lines = [f"### {model}", "", f"Chosen on the even groups ({len(choose)}): tau-b and tied, for the choice only;"]
    lines += ["beside them, tau-b over every group the arm graded, both halves.", ""]
    lines += ["| arm | server | tau-b | tied | tau-b, all groups [95% CI] |", "|---|---|---|---|---|"]
    for record in records:
        fig, whole = arm_figures(record, choose), arm_figures(record, groups)
        tau = "-" if fig["tau"] is None else f"{fig['tau']:.2f}"
        tied = "-" if fig["tied"] is None else f"{fig['tied']:.2f}"
        every = "-" if whole["tau"] is None else f"{whole['tau']:.2f}"
        if whole["interval"]:
            every += f" [{whole['interval'][0]:.2f}, {whole['interval'][1]:.2f}]"
        mark = " (chosen)" if record is pick else ""
        lines.append(f"| {record['arm']}{mark} | {record['server']} | {tau} | {tied} | {every} |")
    lines += ["", f"Reported on the odd groups ({len(report)}), which no choice looked at:", ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(table_row(r, report)) + " |" for r in records]
    if pick is not None:
        named = f"{pick['arm']}, {pick['server']}"
        lines += ["", f"The chosen arm ({named}) less each other arm, tau-b on the reported half [95% CI]:", ""]
        for record in records:
            if record is pick or "probabilities" in record["arm"]:
                continue
            found = difference(pick, record, report)
            text = "-" if found is None else f"{found[0]:+.2f} [{found[1][0]:+.2f}, {found[1][1]:+.2f}]"
            lines.append(f"- {record['arm']} ({record['server']}): {text}")
    return [*lines, ""]


def render(records: Sequence[dict[str, Any]], groups: Sequence[Group]) -> str:
    lines = [
        "## whileai's judge and RULER, side by side",
        "",
        "Written by `benchmarks/judge_vs_ruler.py` (its docstring says how every figure is computed), every arm on the",
        "same groups through the same proxy and a server of its own; each arm's answers are in `judge_vs_ruler.json`.",
        "The server column names its program: llama-server is llama.cpp's own, llama_cpp.server llama-cpp-python's.",
        "Variants are chosen on the even groups and reported on the odd ones. tau-b: the mean over answered groups",
        "against the simulation's quality; tied: the share of answered groups whose passes all got one place; calls,",
        "tokens and seconds: per group, over every group the arm graded (the server's counts).",
        "",
    ]
    for model in dict.fromkeys(r["model"] for r in records):
        mine = [r for r in records if r["model"] == model]
        graded = {t for r in mine for t in r["groups"]}  # an arm may have graded fewer groups than another
        lines += render_model(model, mine, [g for g in groups if g.task_id in graded])
    return "\n".join(lines)


def save(out: Path, json_path: Path, records: list[dict[str, Any]], groups: Sequence[Group]) -> None:
    references = {g.task_id: {"passed": g.passed, "quality": g.quality, "hacks": g.hacks} for g in groups}
    body = {"format": FORMAT, "references": references, "records": records}
    write_whole(json_path, json.dumps(body, indent=1) + "\n")
    write_section(out, "judge-vs-ruler", render(records, groups))


def load(json_path: Path) -> list[dict[str, Any]]:
    """The records of ``json_path``; one written before records named their server ran on llama-cpp-python's."""
    if not json_path.exists():
        return []
    data = json.loads(json_path.read_text())
    if data.get("format") != FORMAT:
        raise SystemExit(f"{json_path} is not a {FORMAT} file")
    return [{"server": "llama_cpp.server", **r} for r in data["records"]]


def key(record: dict[str, Any]) -> tuple[str, str, str]:
    """What a record is one of: a model's arm on a server (a rerun replaces it; another server's run stays)."""
    return record["model"], record["arm"], record["server"]


def server_name(command: Sequence[str]) -> str:
    """The server program a command line runs: for a python, the module after ``-m`` or the script's file name; else
    the program's file name."""
    if not Path(command[0]).name.startswith("python") or len(command) < 2:
        return Path(command[0]).name
    return command[2] if command[1] == "-m" and len(command) > 2 else Path(command[1]).name


# ---------------------------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="the GGUF file (needed unless --rerender)")
    parser.add_argument("--server-python", default=sys.executable, help="the python that has llama_cpp.server")
    parser.add_argument("--server-cmd", default=DEFAULT_SERVER_CMD, help="the server's command line [llama_cpp]")
    parser.add_argument("--ruler-python", default=None, help="a python with openpipe-art; none: no RULER arm")
    parser.add_argument("--whileai", default="scores:v2,ranking:v2", help="form:prompts arms, comma-separated")
    parser.add_argument("--of-4", type=int, default=40, help="groups of 4 rollouts [40]")
    parser.add_argument("--of-8", type=int, default=6, help="groups of 8 rollouts [6]")
    parser.add_argument("--max-tokens", type=int, default=1024, help="max_tokens of every call [1024]")
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--out", type=Path, default=OUT, help="the Markdown page the table goes in, as a section")
    parser.add_argument("--json", type=Path, default=OUT_JSON, help="every arm's answers and figures")
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--rerender", action="store_true", help="write the page again from --json; ask nothing")
    return parser.parse_args(argv)


def benchmark(args: argparse.Namespace, work: Path) -> int:
    if not args.model:
        raise SystemExit("judge_vs_ruler: --model is needed (or --rerender to write the page from --json)")
    model = Path(args.model).name
    groups = make_groups(args.of_4, args.of_8, work)
    rows = work / "rows.jsonl"
    write_rows(groups, rows)
    say(f"{len(groups)} groups ({args.of_4} of 4, {args.of_8} of 8), rows in {rows}")
    arms: list[Arm | None] = [Arm.parse(a) for a in args.whileai.split(",") if a]
    arms += [None] if args.ruler_python else []
    records = load(args.json)
    for number, arm in enumerate(arms, 1):
        name = "RULER (default rubric)" if arm is None else arm.name
        # A server of its own for each arm: llama.cpp's keeps earlier prompts' prefixes, which would make an arm
        # that shares a prefix with the one before it cheaper than it is for a user.
        log = work / f"server-{number}.log"
        server = start_server(args.server_cmd, args.server_python, args.model, args.n_ctx, log, 900)
        assert server.process is not None
        say(f"server pid {server.process.pid} at {server.url}, ready in {server.startup_s:.1f} s ({server.model_id})")
        say(f"arm: {name}")
        try:
            with StepDownProxy(server.url) as proxy:
                start = time.perf_counter()
                if arm is None:
                    answers = ruler_arm(groups, args.ruler_python, proxy.url, server.model_id, args.max_tokens, work)
                else:
                    answers = whileai_arm(groups, rows, proxy.url, server.model_id, arm, args.max_tokens, work)
                cost = _cost(proxy.reset(), len(groups), time.perf_counter() - start)
        finally:
            stop_server(server)
        made = [(name, answers, cost)]
        if any(len(a.orders) > 1 for a in answers):  # the same calls' first order, as an arm of one order
            halved = {k: v / 2 if k in ("calls", "tokens_in", "tokens_out", "wall_s") else v for k, v in cost.items()}
            made.append((f"{name} (first order)", first_order(answers), halved))
        for arm_name, arm_answers, arm_cost in made:
            record = {
                "model": model,
                "server": server_name(server.command),
                "arm": arm_name,
                "cost": arm_cost,
                "answers": [
                    {"scores": a.scores, "hacks": a.hacks, "unusable": a.unusable, "orders": a.orders}
                    for a in arm_answers
                ],
                "groups": [g.task_id for g in groups],
            }
            records = [r for r in records if key(r) != key(record)] + [record]
            say("  " + " | ".join(table_row(record, half(groups, 1))))
        save(args.out, args.json, records, groups)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rerender:
        return rerender(args)
    return run_benchmark(args, benchmark, "judge_vs_ruler")


if __name__ == "__main__":
    sys.exit(main())
