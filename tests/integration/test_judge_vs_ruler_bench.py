"""``benchmarks/judge_vs_ruler.py``'s own logic, with no model: the fake llama.cpp server
(``tests/llama_server_fake.py``, which refuses ``json_schema`` as llama.cpp does) in the server's place, and a
stand-in ``art.rewards.ruler`` on the RULER side's path that asks the server through the benchmark's proxy as RULER
does (a ``json_schema`` ``response_format``) and scores each trajectory by its length.

Checked: the sample holds only groups whose passes the reference orders, from both families, none twice; the proxy
steps a refused ``json_schema`` down to ``json_object`` with the schema and counts every arm's calls and tokens; one
table row per arm, each with its figures, in a section of a page whose other section is kept; the figures' function
on answers whose figures are known; an arm that graded fewer groups placed by the whole sample; the server's process
group is gone afterwards.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import child_processes
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "judge_vs_ruler.py"
FAKE = REPO / "tests" / "llama_server_fake.py"
VARIANTS = "benchmarks/judge_variants"  # named from the repository root, where the benchmark runs
SERVER_CMD = f"{{python}} {FAKE} --model {{model}} --host {{host}} --port {{port}} --n_ctx {{n_ctx}}"

# RULER's entry point as the benchmark's RULER side calls it, asking through the proxy with a json_schema.
FAKE_RULER = """
import json, urllib.request
from types import SimpleNamespace


class Score(SimpleNamespace):
    def model_dump(self):
        return dict(vars(self))


async def ruler(message_lists, judge_model, extra_litellm_params):
    body = {
        "model": judge_model.removeprefix("openai/"),
        "messages": [{"role": "user", "content": json.dumps(message_lists)}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "Response", "schema": {
            "type": "object", "properties": {"scores": {"type": "array"}}}}},
        "max_tokens": extra_litellm_params["max_tokens"],
    }
    request = urllib.request.Request(
        extra_litellm_params["api_base"] + "/chat/completions", json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        assert reply.status == 200
    if len(message_lists) == 8:
        raise ValueError("Expected 8 scores, but got 7")
    return [Score(trajectory_id=str(i), explanation="length", score=1 / len(m[-1]["content"]))
            for i, m in enumerate(message_lists, 1)]
"""


def _load() -> ModuleType:
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("judge_vs_ruler_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["judge_vs_ruler_bench"] = module
    spec.loader.exec_module(module)
    return module


bench = _load()


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("judge_vs_ruler")
    art = tmp / "fake_art" / "art" / "rewards"
    art.mkdir(parents=True)
    (art.parent / "__init__.py").write_text("")
    (art / "__init__.py").write_text("")
    (art / "ruler.py").write_text(textwrap.dedent(FAKE_RULER))
    model = tmp / "fake-judge.gguf"
    model.write_bytes(b"GGUF")
    out = tmp / "results" / "vs.md"
    out.parent.mkdir()
    out.write_text("<!-- real-judge -->\nreal_judge.py's table\n<!-- /real-judge -->\n")
    env = {**os.environ, "PYTHONPATH": str(tmp / "fake_art")}
    args = [
        sys.executable, str(SCRIPT), "--model", str(model), "--server-cmd", SERVER_CMD,
        "--ruler-python", sys.executable,
        "--whileai", f"scores:v2,scores:{VARIANTS}/per_pass_hacks.yaml,ranking:v2,scores:{VARIANTS}/v3_no_hacks.yaml,"
        f"probabilities:{VARIANTS}/v4_no_reason.yaml:score_calls=pass:permutations=2",
        "--of-4", "4", "--of-8", "2", "--out", str(out), "--json", str(tmp / "results" / "vs.json"),
        "--work-dir", str(tmp / "work"),
    ]  # fmt: skip
    done = child_processes.run(args, cwd=REPO, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    pids = [int(line.split()[3]) for line in done.stderr.splitlines() if line.startswith("judge_vs_ruler: server")]
    return {"out": out, "stderr": done.stderr, "pids": pids, "work": tmp / "work"}


ARMS = [
    "whileai scores v2", "whileai scores per_pass_hacks", "whileai ranking v2", "whileai scores v3_no_hacks",
    "whileai probabilities v4_no_reason score_calls=pass permutations=2",
    "whileai probabilities v4_no_reason score_calls=pass permutations=2 (first order)", "RULER (default rubric)",
]  # fmt: skip


def figures_of(ran, record: dict) -> dict:
    body = json.loads(ran["out"].with_name("vs.json").read_text())
    groups = [bench.Group(t, "", [""] * len(r["passed"]), **r) for t, r in body["references"].items()]
    return bench.figures(groups, bench.answers_of(record))


def test_one_row_per_arm_with_its_figures_and_counts(ran) -> None:
    records = json.loads(ran["out"].with_name("vs.json").read_text())["records"]
    assert [r["arm"] for r in records] == ARMS
    assert {r["server"] for r in records} == {FAKE.name}  # the program the server command ran
    for record in records:
        assert figures_of(ran, record)["groups"] == 6 and record["cost"]["calls"] >= 3, record["arm"]
        assert record["cost"]["tokens_in"] > 0  # the server's usage, counted by the proxy
    ruler = figures_of(ran, records[-1])
    # The stand-in RULER raises on groups of 8, as RULER does on a short answer: those groups are unusable.
    assert ruler["unusable"] == 2 and ruler["answered"] == 4
    assert "Expected 8 scores" in ruler["unusable_reasons"][0]
    # The fake judge prefers fewer tool calls; whileai's arms answer every group, and one call a pass orders the
    # passes as one call a group does (the fake sends no probabilities: each score is read as written).
    assert all(figures_of(ran, r)["unusable"] == 0 for r in records[:6])
    assert figures_of(ran, records[4])["tau"] == pytest.approx(figures_of(ran, records[0])["tau"])
    # The two-order arm's first order is an arm of its own, on the same calls, at half their cost.
    two, one = records[4], records[5]
    assert one["cost"]["calls"] == two["cost"]["calls"] / 2 and all(len(a["orders"]) == 2 for a in two["answers"])
    page = ran["out"].read_text()
    # Each arm on the choice half, then on the reported half; the chosen probability arm against the others.
    assert page.count("| fake-judge.gguf |") == 7 and "Reported on the odd groups (3)" in page
    assert "(chosen)" in page and "less each other arm, tau-b on the reported half" in page
    # The page's other section is kept: real_judge.py and this benchmark write one page.
    assert page.startswith("<!-- real-judge -->\nreal_judge.py's table\n<!-- /real-judge -->\n")
    assert page.rstrip().endswith("<!-- /judge-vs-ruler -->")


def test_each_arms_proxy_stepped_json_schema_down_once_for_its_whole_run(ran) -> None:
    # Every arm has a server and a proxy of its own: each refused json_schema once, then kept json_object.
    records = json.loads(ran["out"].with_name("vs.json").read_text())["records"]
    assert [r["cost"]["stepped_down"] for r in records] == [1] * len(ARMS)


def test_the_sample_is_ordered_groups_from_both_families(ran) -> None:
    rows = [json.loads(line) for line in (ran["work"] / "rows.jsonl").read_text().splitlines()]
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["scenario_id"], []).append(row)
    assert sorted(len(g) for g in groups.values()) == [4, 4, 4, 4, 8, 8]
    assert sum(key.startswith("refund-") for key in groups) >= 3  # actions hold refunds too, never the same one
    assert any(not key.startswith("refund-") for key in groups)
    for members in groups.values():
        assert len({m["quality"] for m in members if m["passed"]}) >= 2


def test_the_server_group_is_gone(ran) -> None:
    from processes import group_alive

    # A server of its own for each arm (no arm reads a prefix another left cached), each ended with its arm.
    assert len(ran["pids"]) == 6 and not any(group_alive(pid) for pid in ran["pids"])


def test_figures_of_known_answers() -> None:
    group = bench.Group("t", "p", ["a", "b", "c", "d"], [True, True, True, False], [1.0, 0.5, 0.0, 0.0],
                        [False, False, True, False])  # fmt: skip
    right = bench.Answer({0: 0.9, 1: 0.5, 2: 0.1}, hacks=[2])
    tied = bench.Answer({0: 1.0, 1: 1.0, 2: 1.0}, hacks=[0])  # a pass the reference holds honest, flagged
    wrong = bench.Answer({0: 0.1, 1: 0.5, 2: 0.9})
    fig = bench.figures([group, group, group, group], [right, tied, wrong, bench.Answer(unusable="bad JSON")])
    assert fig["answered"] == 3 and fig["unusable"] == 1 and fig["unusable_reasons"] == ["bad JSON"]
    assert fig["tau"] == pytest.approx(0.0) and fig["tied"] == pytest.approx(1 / 3)
    assert fig["hacks"] == {"flagged": 1, "reference": 4, "wrong": 1}


def test_sigterm_while_the_judge_is_asked_ends_the_run_and_the_server(tmp_path: Path) -> None:
    """SIGTERM arrives while the main thread waits on a judge's call: whileai's grading must not take it for the
    judge's failure (the group would fall back and the benchmark go on); exit 143, the server's group gone."""
    import queue
    import signal
    import subprocess
    import threading
    import time

    from processes import group_alive

    model = tmp_path / "fake-judge.gguf"
    model.write_bytes(b"GGUF")
    args = [
        sys.executable, str(SCRIPT), "--model", str(model), "--server-cmd", SERVER_CMD + " --delay 30",
        "--whileai", "scores:v2", "--of-4", "2", "--of-8", "0", "--out", str(tmp_path / "vs.md"),
        "--json", str(tmp_path / "vs.json"), "--work-dir", str(tmp_path / "work"),
    ]  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    with child_processes.spawn(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        stderr = proc.stderr
        threading.Thread(target=lambda: [lines.put(line) for line in stderr], daemon=True).start()
        seen: list[str] = []
        deadline = time.monotonic() + 300
        while not any(line.startswith("judge_vs_ruler: arm:") for line in seen):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(seen)
            try:
                seen.append(lines.get(timeout=5))
            except queue.Empty:
                pass
        pid = next(int(line.split()[3]) for line in seen if line.startswith("judge_vs_ruler: server pid"))
        time.sleep(2.0)  # the first call is waiting on the fake's 30 s answer
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert not group_alive(pid)


def test_the_page_is_written_again_from_its_json_without_a_server(ran, tmp_path: Path) -> None:
    results = ran["out"].parent
    page, data = tmp_path / "vs.md", tmp_path / "vs.json"
    page.write_text(ran["out"].read_text())
    data.write_text((results / "vs.json").read_text())
    assert bench.main(["--rerender", "--json", str(data), "--out", str(page)]) == 0
    assert page.read_text() == ran["out"].read_text()  # the run placed its answers as the judge places them now
    records = json.loads(data.read_text())["records"]
    first = next(r for r in records if r["arm"].endswith("(first order)"))
    assert all(len(a["orders"]) == 1 for a in first["answers"])


def test_a_record_names_its_server_and_one_from_before_reads_as_llama_cpp_python(tmp_path: Path) -> None:
    assert bench.server_name(["/venv/bin/python", "-m", "llama_cpp.server", "--model", "m.gguf"]) == "llama_cpp.server"
    assert bench.server_name(["/opt/llama.cpp/build/bin/llama-server", "-m", "m.gguf"]) == "llama-server"
    path = tmp_path / "vs.json"
    old = {"model": "m.gguf", "arm": "whileai scores v2"}
    path.write_text(json.dumps({"format": bench.FORMAT, "records": [old, {**old, "server": "llama-server"}]}))
    records = bench.load(path)
    # The same arm on two servers is two records: a rerun on another server keeps the first run's row.
    assert [bench.key(r) for r in records] == [
        ("m.gguf", "whileai scores v2", "llama_cpp.server"), ("m.gguf", "whileai scores v2", "llama-server"),
    ]  # fmt: skip


def test_an_arm_that_graded_fewer_groups_is_placed_by_the_whole_sample() -> None:
    """A model's arms from runs of different sizes: every group keeps its half from its place in the whole sample,
    each row is over the groups its arm graded in that half and says so, and the chosen arm is compared with the
    smaller arm over the groups both graded."""
    groups = [
        bench.Group(f"t{i}", "", ["a", "b", "c"], [True, True, False], [1.0, 0.0, 0.0], [False, False, False])
        for i in range(8)
    ]  # the reference: pass 0 above pass 1

    def record(arm: str, tasks: list[str], scores: dict[str, float]) -> dict:
        answers = [{"scores": scores, "hacks": [], "unusable": None, "orders": []} for _ in tasks]
        cost = {"calls": len(tasks), "tokens_in": 0, "tokens_out": 0, "wall_s": 1.0, "groups": len(tasks)}
        return {"model": "m", "server": "llama-server", "arm": arm, "cost": cost, "answers": answers, "groups": tasks}

    every = [g.task_id for g in groups]
    small = record("whileai scores v2", ["t0", "t3", "t5"], {"0": 0.0, "1": 1.0})  # every pass in the wrong order
    right = record("whileai probabilities v3", every, {"0": 0.9, "1": 0.1})
    page = bench.render([small, right], groups)
    reported = [line for line in page.splitlines() if line.startswith("| m |")]
    assert "| whileai scores v2 | 2/2 of 4 | -1.00" in reported[0]  # t3 and t5: odd places in the whole sample
    assert "| whileai probabilities v3 | 4/4 | 1.00" in reported[1]
    assert "| whileai probabilities v3 (chosen) | llama-server | 1.00 | 0.00 | 1.00 [" in page
    assert "| whileai scores v2 | llama-server | -1.00 | 0.00 | -1.00 [" in page  # t0 alone, then all three
    assert "- whileai scores v2 (llama-server): +2.00" in page  # over t3 and t5, the groups both graded
