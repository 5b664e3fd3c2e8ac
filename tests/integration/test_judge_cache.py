"""The on-disk answer cache: a repeated check asks nothing, --no-cache asks again, processes can write at once."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from contextlib import ExitStack
from pathlib import Path

import child_processes
import pytest

from whileai import GroupwiseGrading


def test_a_repeated_spread_check_makes_no_http_call(make_judge, judge_server, page_rows) -> None:
    first = GroupwiseGrading(grader=make_judge("grader", permutations=2)).check_spread(page_rows)
    assert judge_server.calls == 4
    judge = make_judge("grader", permutations=2)  # a new process would build a new judge on the same folder
    second = GroupwiseGrading(grader=judge).check_spread(page_rows)
    assert judge_server.calls == 4
    assert str(second) == str(first)
    assert judge.stats.as_dict()["cache_hits"] == 4 and judge.stats.as_dict()["calls"] == 0

    again = GroupwiseGrading(grader=make_judge("grader", permutations=2, no_cache=True)).check_spread(page_rows)
    assert judge_server.calls == 8 and str(again) == str(first)


def test_the_key_holds_model_prompt_version_and_content(make_judge, judge_server, tmp_path) -> None:
    group = [
        {"index": 0, "prompt": "p", "completion": "a", "reward": 1.0, "passed": True},
        {"index": 1, "prompt": "p", "completion": "b", "reward": 0.0, "passed": False},
    ]
    make_judge("grader")(group)
    make_judge("grader")(group)
    assert judge_server.calls == 1
    make_judge("grader", model="other-judge")(group)
    assert judge_server.calls == 2
    make_judge("grader")([dict(group[0], completion="a!"), group[1]])
    assert judge_server.calls == 3
    source = Path(__file__).resolve().parents[2] / "configs" / "judge" / "v1.yaml"
    custom = tmp_path / "my_prompts.yaml"
    custom.write_text(source.read_text().replace("version: v1", "version: mine"))
    make_judge("grader", prompts=str(custom))(group)
    assert judge_server.calls == 4


_WRITER = textwrap.dedent(
    """
    import sys
    from whileai.judge.cache import JudgeCache
    cache = JudgeCache(sys.argv[1], busy_timeout_s=30)
    for n in range(int(sys.argv[3])):
        cache.put(f"{sys.argv[2]}-{n}", "rank", {"ranking": [[n]], "writer": sys.argv[2]})
    cache.put("shared", "rank", {"writer": sys.argv[2]})
    """
)


@pytest.mark.slow
def test_two_processes_writing_at_once_do_not_corrupt_the_cache(tmp_path) -> None:
    path = tmp_path / "cache" / "judge_cache.sqlite"
    with ExitStack() as stack:
        writers = [
            stack.enter_context(
                child_processes.spawn([sys.executable, "-c", _WRITER, str(path), name, "150"], stderr=subprocess.PIPE)
            )
            for name in ("first", "second")
        ]
        errors = [writer.communicate(timeout=60)[1] for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0], errors
    from whileai.judge import JudgeCache

    cache = JudgeCache(path)
    assert len(cache) == 301
    assert cache.get("first-149") == {"ranking": [[149]], "writer": "first"}
    assert cache.get("second-0") == {"ranking": [[0]], "writer": "second"}
    assert cache.get("shared")["writer"] in {"first", "second"}
    cache.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_broken_cache_file_reads_as_a_miss(make_judge, judge_server, tmp_path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "judge_cache.sqlite").write_bytes(b"this is not a database" * 100)
    judge = make_judge("grader", cache_dir=str(folder))
    answer = judge([{"index": 0, "prompt": "", "completion": "x", "reward": 1.0, "passed": True}])
    assert answer["ranking"] == [[0]] and judge_server.calls == 1
