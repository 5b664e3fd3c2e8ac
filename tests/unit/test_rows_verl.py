"""verl's rollout dumps (``trainer.rollout_data_dir``) read as rows: the shapes verl 0.9.1 writes, v0's
(``ray_trainer._write_generations``: ``input``, ``output``, ``gts``, ``score``, ``step`` and every reward-extra-info
column) and v1's (``trainer_base._write_generations``: the same plus ``uid`` = ``{uid}_{session}_{output}``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from whileai.errors import BadInput
from whileai.grading.gate import check_spread_file
from whileai.rows import RowFields, iter_groups, iter_rows

TEXTS = ["<tool_call>a</tool_call> done", "<tool_call>a</tool_call><tool_call>b</tool_call> done", "sorry"]


def dump(path: Path, rows: list[dict[str, Any]]) -> Path:
    # verl writes json.dumps(ensure_ascii=False) per line; a NaN reward (a verifier's None) as NaN.
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def v0_rows(step: int = 3, whileai: bool = True) -> list[dict[str, Any]]:
    rows = []
    for group in range(2):
        for k, text in enumerate(TEXTS):
            reward = 0.0 if text == "sorry" else 1.0
            row = {"input": f"user: refund order {group}", "output": text, "gts": "done", "score": reward, "step": step}
            if whileai:  # the manager's extra info; score is then the shaped reward
                row.update(score=reward + 0.25 * k, acc=reward, whileai_reward=reward, whileai_group=f"uid-{group}")
                row.update(whileai_member=k, whileai_fallback="")
            rows.append(row)
    return rows


def v1_rows(step: int = 3) -> list[dict[str, Any]]:
    rows = []
    for group in range(2):
        for session, text in enumerate(TEXTS):
            reward = 0.0 if text == "sorry" else 1.0
            rows.append(
                {
                    "input": f"user: refund order {group}",
                    "output": text,
                    "gts": None,
                    "score": reward,
                    "step": step,
                    "uid": f"7c9e6679-7425-40de-944b-e07fc1f90ae{group}_{session}_0",
                }
            )
    return rows


def groups(path: Path, **fields: Any) -> list[tuple[str, list[tuple[float, str, str]]]]:
    return list(iter_groups(path, RowFields(**fields) if fields else None))


def test_a_v0_dump_of_a_whileai_run_reads_the_verifier_reward_and_the_uid(tmp_path: Path) -> None:
    read = groups(dump(tmp_path / "3.jsonl", v0_rows()))
    assert [g for g, _ in read] == ["uid-0", "uid-1"]
    assert [r for r, _, _ in read[0][1]] == [1.0, 1.0, 0.0]  # whileai_reward, not the shaped score
    assert read[0][1][0] == (1.0, "user: refund order 0", TEXTS[0])


def test_a_v0_dump_of_another_manager_reads_score_and_groups_by_prompt(tmp_path: Path) -> None:
    read = groups(dump(tmp_path / "3.jsonl", v0_rows(whileai=False)))
    assert [g for g, _ in read] == ["user: refund order 0", "user: refund order 1"]
    assert [r for r, _, _ in read[1][1]] == [1.0, 1.0, 0.0]


def test_a_v1_dump_groups_by_the_uid_before_session_and_output(tmp_path: Path) -> None:
    read = groups(dump(tmp_path / "3.jsonl", v1_rows()))
    assert [g for g, _ in read] == [
        "7c9e6679-7425-40de-944b-e07fc1f90ae0",
        "7c9e6679-7425-40de-944b-e07fc1f90ae1",
    ]
    assert all(len(members) == 3 for _, members in read)


@pytest.mark.parametrize("parser", ["json", "orjson"])
def test_a_session_of_several_outputs_is_refused_with_its_line(
    tmp_path: Path, parser: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if parser == "orjson":
        pytest.importorskip("orjson")
    monkeypatch.setenv("WHILEAI_JSON", parser)
    rows = v1_rows()
    rows[4]["uid"] = rows[4]["uid"].replace("_1_0", "_1_1")
    path = dump(tmp_path / "3.jsonl", rows)
    with pytest.raises(BadInput, match=r"3\.jsonl line 5: verl output 1 of session .*_1: a session with several"):
        groups(path)
    assert len(list(iter_groups(path, skip_bad=True))) == 2  # skipped, counted


def test_a_uid_that_is_not_a_session_key_is_its_own_group(tmp_path: Path) -> None:
    rows = v1_rows()
    for row in rows:
        row["uid"] = row["uid"].rsplit("_", 2)[0] + "_x_y"
    read = groups(dump(tmp_path / "3.jsonl", rows))
    assert [g for g, _ in read] == [rows[0]["uid"], rows[3]["uid"]]  # the key as it is


def test_a_folder_of_steps_keeps_each_step_s_groups_apart(tmp_path: Path) -> None:
    folder = tmp_path / "rollouts"
    folder.mkdir()
    dump(folder / "1.jsonl", v0_rows(step=1, whileai=False))
    dump(folder / "2.jsonl", v0_rows(step=2, whileai=False))
    read = groups(folder)
    assert len(read) == 4 and read[0][0] == "1.jsonl:user: refund order 0"


def test_named_fields_win(tmp_path: Path) -> None:
    read = groups(dump(tmp_path / "3.jsonl", v0_rows()), reward_key="score", group_key="input")
    assert [r for r, _, _ in read[0][1]] == [1.0, 1.25, 0.5]


def test_a_nan_score_is_unscorable_not_bad(tmp_path: Path) -> None:
    rows = v0_rows(whileai=False)
    rows[0]["score"] = float("nan")
    read = groups(dump(tmp_path / "3.jsonl", rows))
    assert read[0][1][0][0] != read[0][1][0][0]


def test_every_row_reader_sees_the_same_groups(tmp_path: Path) -> None:
    path = dump(tmp_path / "3.jsonl", v1_rows())
    assert {group for _, group, _, _ in iter_rows(path)} == {g for g, _ in groups(path)}


def test_the_spread_gate_runs_on_a_dump(tmp_path: Path) -> None:
    """The preflight on a verl run's own rollouts: the built-in rule tells the two passes of each group apart."""
    from whileai import GroupwiseGrading
    from whileai.config.schema import ScriptedRule
    from whileai.grading.scripted import ScriptedGrader

    grader = ScriptedGrader(ScriptedRule(measure="matches", pattern="<tool_call>", order="ascending"))
    run = check_spread_file(dump(tmp_path / "3.jsonl", v1_rows()), GroupwiseGrading(grader))
    report = run.report
    assert report.groups == 2 and sorted(report.scores) == [0.5, 0.5, 1.0, 1.0]
