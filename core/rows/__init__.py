"""Rows of graded rollouts from files (JSONL, JSON, Parquet, TRL's completion logs, verl's rollout dumps), streamed
as groups: ``groups`` (the reader), ``files`` (the files and their raw rows), ``fields`` (which field holds what, one
row read as a member of its group), ``text`` (the one rendering of a rollout a grader reads), ``rewards`` and
``verdicts`` (a verifier's answer as a reward). The names below are the readers' public ones.
"""

from whileai.rows.fields import Member, RowFields, RowStats
from whileai.rows.files import JSON_ENV, json_parser, list_row_files
from whileai.rows.groups import GroupsNotContiguous, iter_groups, iter_rows, read_rows

__all__ = [
    "JSON_ENV",
    "GroupsNotContiguous",
    "Member",
    "RowFields",
    "RowStats",
    "iter_groups",
    "iter_rows",
    "json_parser",
    "list_row_files",
    "read_rows",
]
