"""The shape of a graded row: which fields hold its group, its verifier reward, its text and its prompt, for each
format whileai reads (its own rows, TRL's completion logs, verl's rollout dumps), and one row read as a member of
its group (``read_member``), every bad field a ``BadInput`` naming where. Nothing here opens a file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whileai.errors import BadInput
from whileai.rows.rewards import FLOAT32_LIMIT, verifier_reward
from whileai.rows.text import completion_text, prompt_text

__all__ = ["TRL_LOG_COLUMNS", "Member", "RowFields", "RowStats", "plain_member", "read_member"]

Member = tuple[float, str, str]  # (reward, prompt, completion text)

# Columns of a TRL completion log that are not a reward function's.
TRL_LOG_COLUMNS = frozenset({"step", "prompt", "completion", "advantage", "images", "image"})


@dataclass(frozen=True)
class RowFields:
    """The field names a row is read by; None picks the default for the file's format.

    ``trl_log`` marks a TRL completion log (set by ``for_columns``): its groups are deduplicated across files;
    ``logged`` rows of the common log shape (``prompt``, ``completion``, ``reward``), read with those fields.
    """

    group_key: str | None = None
    reward_key: str | None = None
    text_key: str | None = None
    prompt_key: str = "prompt"
    trl_log: bool = False
    verl_sessions: bool = False
    logged: bool = False

    def group_of(self, value: Any, where: str) -> Any:
        """The group a row's group value names: a verl v1 dump's ``{uid}_{session}_{output}`` key is its ``uid``
        (a session of several outputs is refused, naming ``where``); any other value is its own group."""
        if not self.verl_sessions or type(value) is not str:
            return value
        parts = value.rsplit("_", 2)
        if len(parts) != 3 or not (parts[1].isdigit() and parts[2].isdigit()):
            return value
        if parts[2] != "0":
            raise BadInput(
                f"{where}: verl output {parts[2]} of session {parts[0]}_{parts[1]}: a session with several outputs "
                "has no one text to grade; whileai reads rollouts of one output per session"
            )
        return parts[0]

    def for_columns(self, columns: Sequence[str], path: Path | None = None) -> RowFields:
        """Fill the defaults: TRL completion logs (a ``completion`` and an ``advantage`` column) or page rows.

        Raises:
            BadInput: a TRL log without whileai's ``whileai_reward`` column and no ``reward_key`` given, naming the
                reward columns the log has.
        """
        trl_log = "completion" in columns and "advantage" in columns and "final_text" not in columns
        if trl_log:
            if self.reward_key is None and "whileai_reward" not in columns:
                rewards = [c for c in columns if c not in TRL_LOG_COLUMNS and not c.startswith("whileai_")]
                found = ", ".join(repr(c) for c in rewards) or "none"
                raise BadInput(
                    f"{path or 'the rows'}: a TRL completion log without whileai's 'whileai_reward' column (the run "
                    f"did not train with whileai's reward function); its reward columns: {found}. Name the one that "
                    "says pass or fail with --reward-key (spread.reward_key in a recipe)"
                )
            # whileai's reward functions log each completion's group; without it, a group is a prompt.
            return RowFields(
                self.group_key or ("whileai_group" if "whileai_group" in columns else "prompt"),
                self.reward_key or "whileai_reward",
                self.text_key or "completion",
                self.prompt_key,
                trl_log=True,
            )
        if {"input", "output", "score", "step"} <= set(columns) and "final_text" not in columns:  # verl's dump
            if self.group_key is not None:
                group = self.group_key
            else:
                group = next((c for c in ("whileai_group", "uid") if c in columns), "input")
            return RowFields(
                group,
                self.reward_key or ("whileai_reward" if "whileai_reward" in columns else "score"),
                self.text_key or "output",
                "input" if self.prompt_key == "prompt" else self.prompt_key,
                verl_sessions=group == "uid",
            )
        if "completion" in columns and "final_text" not in columns and self.text_key is None:
            # Logged rows (prompt, completion, reward): each task, scenario or else prompt is a group.
            group = self.group_key or next((c for c in ("task_id", "scenario_id") if c in columns), self.prompt_key)
            return RowFields(group, self.reward_key or "reward", "completion", self.prompt_key, logged=True)
        return RowFields(
            self.group_key or "scenario_id",
            self.reward_key or "reward",
            self.text_key or "final_text",
            self.prompt_key,
        )

    @property
    def read_as(self) -> str:
        """How logged rows were read, in one line (empty for any other form); the caller says how to name others."""
        if not self.logged:
            return ""
        return (
            f"read as logged rows: each {self.group_key!r} a group, {self.text_key!r} the text, {self.reward_key!r} "
            "the verifier's reward"
        )


@dataclass
class RowStats:
    """What the reader saw: rows read, rows skipped as bad (with the first few reasons), files read, files of a
    folder left out (each with why), groups dropped as repeats of a group already read (a TRL log that wrote one
    generation into two files), and how rows of the logged form were read (``RowFields.read_as``)."""

    rows: int = 0
    skipped: int = 0
    files: int = 0
    examples: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    duplicates: int = 0
    read_as: str = ""

    def skip(self, reason: str) -> None:
        self.skipped += 1
        if len(self.examples) < 5:
            self.examples.append(reason)


def _group_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return str(value)


def plain_member(
    row: Any, group_key: str, reward_key: str, text_key: str, prompt_key: str
) -> tuple[str, Member] | None:
    """(group id, member) of a plain row: a dict with a string group, a finite float (or an integer a float holds
    exactly) reward, string text and a string or no prompt. None for anything else (``read_member`` decides).

    Checked by type only: the common case, and the only rows the fast JSON parser's values are taken for.
    """
    if type(row) is not dict:
        return None
    group, reward, text = row.get(group_key), row.get(reward_key), row.get(text_key)
    prompt = row.get(prompt_key)
    if (
        type(group) is str
        and (type(reward) is float or (type(reward) is int and -(2**53) <= reward <= 2**53))
        and -FLOAT32_LIMIT < reward < FLOAT32_LIMIT
        and type(text) is str
        and (prompt is None or type(prompt) is str)
    ):
        return group, (float(reward), prompt or "", text)
    return None


# The fields a row of another tool's form holds its group, reward and text in, the likeliest first (TRL's rows and logs
# have prompt and completion; verl's dumps and many datasets have these names).
_LIKELY_FIELDS = {
    "group": ("task_id", "scenario_id", "uid", "prompt", "question"),
    "reward": ("reward", "score", "whileai_reward", "acc"),
    "text": ("completion", "response", "output", "final_text", "text"),
}


def _missing_fields(row: dict[str, Any], missing: list[tuple[Any, str]]) -> str:
    """Every field a row lacks, in one message: the row's fields, and the options that name the ones to read (with
    the likeliest of them, when the row has one)."""
    fields = ", ".join(map(str, list(row)[:8])) + (", ..." if len(row) > 8 else "")
    options, keys = [], []
    for _, what in missing:
        likely = next((name for name in _LIKELY_FIELDS[what] if name in row), None)
        options.append(f"--{what}-key" + (f" {likely}" if likely else " FIELD"))
        keys.append(f"{what}_key")
    quoted = [repr(key) for key, _ in missing]
    named = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"
    return (
        f"missing field{'s' if len(missing) > 1 else ''} {named} (the row has {fields}; name "
        f"{'them' if len(missing) > 1 else 'it'} with {' '.join(options)}, or spread.{', spread.'.join(keys)} in a "
        "recipe)"
    )


def read_member(row: Any, fields: RowFields, where: str) -> tuple[str, Member]:
    """(group id, member) of one row, or ``BadInput`` naming ``where`` and the field."""
    plain = plain_member(row, fields.group_key, fields.reward_key, fields.text_key, fields.prompt_key)  # type: ignore[arg-type]
    if plain is not None:
        return plain
    if not isinstance(row, dict):
        raise BadInput(f"{where}: a row is a JSON object, got {type(row).__name__}")
    wanted = ((fields.group_key, "group"), (fields.reward_key, "reward"), (fields.text_key, "text"))
    if missing := [(key, what) for key, what in wanted if key not in row]:
        raise BadInput(f"{where}: {_missing_fields(row, missing)}")
    group = row[fields.group_key]
    if group is None:
        raise BadInput(f"{where}: field {fields.group_key!r} is empty")
    try:
        # None, NaN and inf (TRL logs a verifier's None as NaN) are unscorable: the gate leaves them out, counted.
        reward = verifier_reward(row[fields.reward_key])
    except ValueError:
        given = row[fields.reward_key]
        raise BadInput(f"{where}: field {fields.reward_key!r} is not a number (got {given!r})") from None
    text = row[fields.text_key]
    if text is None or not isinstance(text, (str, list, dict)):
        raise BadInput(f"{where}: field {fields.text_key!r} is not text or a list of messages (got {text!r})")
    prompt = row.get(fields.prompt_key)
    prompt = "" if prompt is None else prompt_text(prompt)
    return _group_value(group), (float(reward), prompt, completion_text(text))
