"""``JudgeCache``: the judge's answers on disk (sqlite), so a repeated spread check or a resumed run asks nothing twice.

A key is the sha256 of what decides an answer: the model, the prompt version and its text digest, the kind of call
and the exact messages (which hold the group's content in its seeded display order). A value is the checked answer
as JSON; unusable answers and failed calls are never stored, so they are asked again next time. The file is safe
with several processes writing (WAL journal, a busy timeout, one short transaction per write) and after a fork (a
process opens its own connection). A cache error is logged and read as a miss: the cache never stops a run.
This module stores what it is given; it neither builds keys from groups nor calls a judge. The API key is never
part of a key or a value.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["JudgeCache", "cache_key"]

log = logging.getLogger("whileai.judge")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, kind TEXT NOT NULL, value TEXT NOT NULL, created REAL)"
)


def cache_key(**parts: Any) -> str:
    """The sha256 of ``parts`` as canonical JSON.

    Example:
        >>> cache_key(model="m", messages=[]) == cache_key(messages=[], model="m")
        True
    """
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class JudgeCache:
    """An sqlite answer cache at ``path`` (created with its folder on first use).

    Example:
        >>> import tempfile, pathlib
        >>> cache = JudgeCache(pathlib.Path(tempfile.mkdtemp()) / "judge_cache.sqlite")
        >>> cache.put("k", "rank", {"ranking": [["A"]]}); cache.get("k")
        {'ranking': [['A']]}
    """

    def __init__(self, path: Path | str, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        # After a fork the parent's connection must not be used (or closed) by the child: open a new one.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
        deadline = time.monotonic() + self.busy_timeout_s
        while True:  # switching to WAL needs a moment alone with the file; another process may hold it
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(_SCHEMA)
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    conn.close()
                    raise
                time.sleep(0.05)
        self._conn, self._pid = conn, os.getpid()
        return conn

    def get(self, key: str) -> Any | None:
        """The stored answer for ``key``, or None (also on any cache error, which is logged)."""
        return self.get_many([key]).get(key)

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        """The stored answers among ``keys``; a cache error is logged and reads as no hits."""
        if not keys:
            return {}
        found: dict[str, Any] = {}
        try:
            with self._lock:
                conn = self._connection()
                for start in range(0, len(keys), 500):
                    chunk = keys[start : start + 500]
                    marks = ",".join("?" * len(chunk))
                    for key, value in conn.execute(f"SELECT key, value FROM answers WHERE key IN ({marks})", chunk):
                        found[key] = json.loads(value)
        except (sqlite3.Error, OSError, ValueError) as exc:
            log.warning("judge cache %s: read failed, asking the judge instead: %s", self.path, exc)
            return {}
        return found

    def put(self, key: str, kind: str, value: Any) -> None:
        """Store ``value`` (JSON-ready) under ``key``; a cache error is logged and ignored."""
        text = json.dumps(value, sort_keys=True, ensure_ascii=False)
        try:
            with self._lock:
                self._connection().execute(
                    "INSERT OR REPLACE INTO answers (key, kind, value, created) VALUES (?, ?, ?, ?)",
                    (key, kind, text, time.time()),
                )
        except (sqlite3.Error, OSError) as exc:
            log.warning("judge cache %s: write failed, answer not kept: %s", self.path, exc)

    def __len__(self) -> int:
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
