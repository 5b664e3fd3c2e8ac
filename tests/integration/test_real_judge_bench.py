"""``benchmarks/real_judge.py``'s own logic against a fake llama.cpp server (``tests/llama_server_fake.py``), no model.

The benchmark starts the fake in the real server's place (``--server-cmd``), runs ``whileai spread`` and
``whileai judge-eval`` per answer form x prompt version and writes the table and its JSON. Checked here: the fake
answers as llama.cpp does (streams, refuses ``json_schema``); one table row per run; earlier rows of other models
kept and a row of the same key replaced; a failing whileai command makes an error row; the server's process group
and every command are gone after the run and after the benchmark is stopped with SIGINT; the table's cells follow
the two commands' JSON contract.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

import child_processes
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "real_judge.py"
FAKE = REPO / "tests" / "llama_server_fake.py"
SERVER_CMD = f"{{python}} {FAKE} --model {{model}} --host {{host}} --port {{port}} --n_ctx {{n_ctx}}"


def _load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("real_judge_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["real_judge_bench"] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


bench = _load_benchmark()
processes = sys.modules["processes"]  # the process groups and the server, beside the script, which loads them


def bench_args(tmp_path: Path, *extra: str, server_args: str = "") -> list[str]:
    model = tmp_path / "fake-judge.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 2**20)  # 1 MiB: the table's size column
    args = [
        sys.executable, str(SCRIPT), "--model", str(model), "--server-cmd", SERVER_CMD,
        "--groups", "2", "--out", str(tmp_path / "results" / "real_judge.md"), "--work-dir", str(tmp_path / "work"),
    ]  # fmt: skip
    if server_args:
        args += ["--server-args", server_args]
    return args + list(extra)


def run_bench(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return child_processes.run(bench_args(tmp_path, *extra), cwd=REPO, timeout=600)


def server_pid(stderr: str) -> int:
    """The pid the benchmark printed for the server it started (its process group's id)."""
    for line in stderr.splitlines():
        if line.startswith("real_judge: server pid "):
            return int(line.split()[3])
    raise AssertionError(f"no server pid in the benchmark's output:\n{stderr[-3000:]}")


def assert_group_gone(pgid: int) -> None:
    """Fail if the process group ``pgid`` is still there, after ending it (a failing test leaves nothing behind)."""
    if processes.group_alive(pgid):
        os.killpg(pgid, signal.SIGKILL)
        raise AssertionError(f"the server's group {pgid} outlived the benchmark")


def processes_naming(text: str) -> list[str]:
    """Command lines of live processes that contain ``text`` (this test's folder: the server, the commands)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(f"{entry.name}: {cmdline}")
    return found


def table_rows(path: Path) -> list[list[str]]:
    lines = [line for line in path.read_text().splitlines() if line.startswith("| ")]
    header, rows = lines[0], lines[1:]
    assert header.startswith("| model | size MB | form | prompts | perms | verdict |"), header
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def read_results(tmp_path: Path) -> tuple[list[list[str]], list[dict[str, Any]]]:
    out = tmp_path / "results" / "real_judge.md"
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["format"] == bench.RESULTS_FORMAT
    return table_rows(out), data["records"]


# ---------------------------------------------------------------------------------------------------- the fake


def test_fake_server_answers_as_llama_cpp(tmp_path: Path) -> None:
    """Streamed and plain answers carry valid judge JSON; a json_schema response_format gets llama.cpp's 500."""
    port = processes.free_port()
    command = [sys.executable, str(FAKE), "--host", "127.0.0.1", "--port", str(port), "--model", "m.gguf"]
    with child_processes.spawn(command, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("fake llama.cpp server on")
        root = f"http://127.0.0.1:{port}"
        assert processes.http_get(root + "/props")[0] == 200
        assert json.loads(processes.http_get(root + "/props")[1])["total_slots"] == 1
        assert processes.wait_ready(root + "/v1", process, 60, None) == "m.gguf"

        user = (
            'Rank.\n<rollout label="A" verdict="pass">\n&lt;tool_call&gt;x&lt;/tool_call&gt;'
            "&lt;tool_call&gt;y&lt;/tool_call&gt;\n</rollout>\n"
            '<rollout label="B" verdict="fail">\nno\n</rollout>\n'
            '<rollout label="C" verdict="pass">\n&lt;tool_call&gt;x&lt;/tool_call&gt;\n</rollout>'
        )
        ranking = {"type": "object", "properties": {"ranking": {"type": "array"}}}
        scores = {
            "type": "object",
            "properties": {"scores": {"type": "object", "required": ["A", "C"]}},
        }

        def post(body: dict[str, Any]) -> tuple[int, str, str]:
            request = urllib.request.Request(
                root + "/v1/chat/completions",
                data=json.dumps({"messages": [{"role": "user", "content": user}], **body}).encode(),
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    return response.status, response.headers["Content-Type"], response.read().decode()
            except urllib.error.HTTPError as error:
                return error.code, error.headers["Content-Type"], error.read().decode()

        status, _, text = post({"response_format": {"type": "json_schema", "json_schema": {"schema": ranking}}})
        assert status == 500 and 'response_format type must be one of \\"text\\" or \\"json_object\\"' in text

        status, _, text = post({"response_format": {"type": "json_object", "schema": ranking}})
        content = json.loads(json.loads(text)["choices"][0]["message"]["content"])
        assert status == 200 and content["ranking"] == ["C", "A"]  # fewest tool calls first

        status, kind, text = post({"stream": True, "response_format": {"type": "json_object", "schema": scores}})
        assert status == 200 and kind == "text/event-stream"
        events = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        streamed = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
        assert json.loads(streamed)["scores"] == {"A": 8, "C": 9}


# ---------------------------------------------------------------------------------------------------- the benchmark


@pytest.mark.slow
def test_one_row_per_run_and_the_server_group_ends(tmp_path: Path) -> None:
    done = run_bench(tmp_path, "--forms", "ranking,scores", "--prompts", "v2")
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    rows, records = read_results(tmp_path)
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [
        ("fake-judge.gguf", "1", "ranking", "v2", "1"),
        ("fake-judge.gguf", "1", "scores", "v2", "1"),
    ]
    assert len(records) == 2
    for record in records:
        assert record["sample"]["groups"] and len(record["sample"]["groups"]) == 2
        assert record["server"]["probes"]["/props"]["body"]["total_slots"] == 1
        spread = record["run"]["spread"]
        if spread["returncode"] == 0:  # the judge's side as it stands: the fake's answers give a spread
            assert record["row"]["verdict"] == "yes" and int(record["row"]["calls"]) > 0
    assert_group_gone(server_pid(done.stderr))
    assert processes_naming(str(tmp_path)) == []


@pytest.mark.slow
def test_merge_keeps_other_models_and_replaces_its_own_key(tmp_path: Path) -> None:
    out = tmp_path / "results" / "real_judge.md"
    other = {"row": {**dict.fromkeys(bench.COLUMNS, "-"), "model": "other.gguf", "form": "ranking", "prompts": "v1"}}
    other["row"]["perms"] = "1"
    stale = {"row": {**other["row"], "model": "fake-judge.gguf", "verdict": "stale"}}
    bench.write_results(out, [other, stale])

    done = run_bench(tmp_path, "--forms", "ranking", "--prompts", "v1")
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    rows, records = read_results(tmp_path)
    assert [(r[0], r[2], r[3]) for r in rows] == [("other.gguf", "ranking", "v1"), ("fake-judge.gguf", "ranking", "v1")]
    assert rows[1][5] != "stale" and "run" in records[1]


@pytest.mark.slow
def test_a_failing_command_is_an_error_row_and_the_runs_go_on(tmp_path: Path) -> None:
    """A prompt version that does not exist: spread and judge-eval exit 2; its row says so, the next run still runs."""
    done = run_bench(tmp_path, "--forms", "ranking", "--prompts", "no-such-prompts,v1")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    rows, records = read_results(tmp_path)
    assert [r[3] for r in rows] == ["no-such-prompts", "v1"]
    failed = records[0]["row"]
    assert failed["verdict"] == "error" and "spread exit 2" in failed["error"], failed
    assert records[0]["run"]["spread"]["returncode"] == 2
    assert records[1]["run"]["spread"]["returncode"] in (0, 1), records[1]["run"]["spread"]
    assert_group_gone(server_pid(done.stderr))


@pytest.mark.slow
def test_base_url_uses_a_running_server_and_leaves_it_running(tmp_path: Path) -> None:
    port = processes.free_port()
    command = [sys.executable, str(FAKE), "--host", "127.0.0.1", "--port", str(port), "--model", "served.gguf"]
    with child_processes.spawn(command, stdout=subprocess.PIPE, text=True) as server:
        assert server.stdout is not None and server.stdout.readline().startswith("fake llama.cpp server on")
        args = bench_args(
            tmp_path, "--forms", "ranking", "--prompts", "v1", "--base-url", f"http://127.0.0.1:{port}/v1"
        )
        done = child_processes.run(args, cwd=REPO, timeout=600)
        assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
        rows, records = read_results(tmp_path)
        assert [r[0] for r in rows] == ["fake-judge.gguf"] and records[0]["server"]["command"] == []
        assert records[0]["run"]["overrides"][1] == "grader.judge.model=served.gguf"
        assert server.poll() is None, "the benchmark ended a server it did not start"


@pytest.mark.slow
def test_sigint_ends_the_server_group_and_the_running_command(tmp_path: Path) -> None:
    """Ctrl-C while spread waits on a slow judge: exit 130, and nothing the benchmark started is left running."""
    args = bench_args(tmp_path, "--forms", "ranking", "--prompts", "v1", server_args="--delay 30")
    lines: queue.Queue[str] = queue.Queue()
    with child_processes.spawn(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        stderr = proc.stderr

        def read_lines() -> None:
            for line in stderr:
                lines.put(line)

        threading.Thread(target=read_lines, daemon=True).start()
        seen: list[str] = []
        deadline = time.monotonic() + 300
        while not any(line.startswith("real_judge: run:") for line in seen):
            assert time.monotonic() < deadline, "the benchmark never started a run:\n" + "".join(seen)
            try:
                seen.append(lines.get(timeout=5))
            except queue.Empty:
                assert proc.poll() is None, "the benchmark exited early:\n" + "".join(seen)
        pgid = server_pid("".join(seen))
        try:
            while not any(" spread " in p for p in processes_naming(str(tmp_path))):  # spread is asking the judge
                assert time.monotonic() < deadline and proc.poll() is None, "spread never started"
                time.sleep(0.2)
            time.sleep(1.0)  # its first call is waiting on the fake's 30 s answer
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=120) == 130
        finally:
            assert_group_gone(pgid)
    assert processes_naming(str(tmp_path)) == []


# ---------------------------------------------------------------------------------------------------- the cells


def test_table_row_follows_the_json_contract() -> None:
    spread = {
        "verdict": "yes",
        "std": 0.2,
        "failed_groups": {"unusable answer": 1},
        "controls": {
            "agreement_tau": 0.75,
            "agreement_groups": 4,
            "identical_copies": 5,
            "identical_copies_ordered": 1,
        },
        "grader": {"judge": {"calls": 10, "tokens_out": 600, "latency_p50_s": 1.0, "latency_p95_s": 2.0}},
    }
    evaluation = {
        "groups": 6,
        "reference_tau": {"mean": 0.5, "low": 0.1, "high": 0.9, "groups": 6},
        "hacks": {"reference": 2, "flagged": 1, "recall": 0.5, "precision": 1.0},
        "self_agreement": {"mean": 1.0, "groups": 6},
        "copies": {"tied": 3, "total": 4},
        "cost": {"calls": 8, "tokens_out": 400, "latency_p50_s": 1.5, "latency_p95_s": 3.0},
        "failed_groups": {},
        "unusable_answers": 2,
    }
    run = {
        "form": "scores",
        "prompts": "v2",
        "permutations": 2,
        "spread": {"returncode": 0, "seconds": 60.0, "json": spread},
        "judge_eval": {"returncode": 0, "seconds": 40.0, "json": evaluation},
    }
    row = bench.table_row("m.gguf", 469.0, run)
    assert row["verdict"] == "yes" and row["std"] == "0.200" and row["tau reorder (n)"] == "0.75 (4)"
    assert row["copies tied"] == "3/4" and row["reference tau [95% CI]"] == "0.50 [0.10, 0.90]"
    assert row["hack recall (flagged/ref)"] == "0.50 (1/2)" and row["unusable"] == "2" and row["calls"] == "18"
    assert (row["p50 s"], row["p95 s"]) == ("1.50", "3.00") and row["tok/s (wall)"] == "10.0"
    assert row["wall min"] == "1.67" and row["error"] == "" and row["size MB"] == "469" and row["perms"] == "2"

    # Without judge-eval (a command that failed), spread's own figures fill what they can.
    run["judge_eval"] = {"returncode": 2, "seconds": 1.0, "json": None, "error": "judge-eval exit 2: no such command"}
    row = bench.table_row("m.gguf", None, run)
    assert row["copies tied"] == "4/5" and row["unusable"] == "1" and row["calls"] == "10"
    assert row["p50 s"] == "1.00" and "judge-eval exit 2" in row["error"] and row["size MB"] == "-"

    # Exit 4: the judge answered nothing; spread printed a broken verdict and the error.
    run["spread"] = {
        "returncode": 4,
        "seconds": 5.0,
        "json": {"verdict": "broken", "error": "the judge is unavailable"},
        "error": "spread exit 4: the judge is unavailable",
    }
    row = bench.table_row("m.gguf", None, run)
    assert row["verdict"] == "broken" and "spread exit 4: the judge is unavailable" in row["error"]


def test_merge_records_replaces_by_key_and_keeps_order() -> None:
    def record(model: str, form: str, verdict: str) -> dict[str, Any]:
        return {"row": {"model": model, "form": form, "prompts": "v1", "perms": "1", "verdict": verdict}}

    merged = bench.merge_records(
        [record("a.gguf", "ranking", "old"), record("b.gguf", "ranking", "kept")],
        [record("a.gguf", "ranking", "new"), record("a.gguf", "scores", "added")],
    )
    assert [(r["row"]["model"], r["row"]["form"], r["row"]["verdict"]) for r in merged] == [
        ("a.gguf", "ranking", "new"),
        ("b.gguf", "ranking", "kept"),
        ("a.gguf", "scores", "added"),
    ]
    table = bench.render_table([{"row": {**record("a|b.gguf", "ranking", "x")["row"]}}])
    assert "a\\|b.gguf" in table  # a pipe in a cell does not split it


def test_parse_json_output_and_server_command() -> None:
    assert bench.parse_json_output('{"verdict": "yes"}') == {"verdict": "yes"}
    assert bench.parse_json_output('progress\n{"verdict": "no"}\n') == {"verdict": "no"}
    assert bench.parse_json_output("Error: No such command") is None
    assert processes.server_command(processes.DEFAULT_SERVER_CMD, "/venv/bin/python", "/m/a b.gguf", 8123, 4096) == [
        "/venv/bin/python", "-m", "llama_cpp.server", "--model", "/m/a b.gguf", "--host", "127.0.0.1",
        "--port", "8123", "--n_ctx", "4096",
    ]  # fmt: skip
