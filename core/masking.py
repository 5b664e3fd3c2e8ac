"""``SecretFilter``: every piece of a secret taken out of a text, at the one place text from a server comes in.

An endpoint client holds secrets (the API key, a URL's password and its Basic token, a proxy's password), and a
server may echo them back: whole, in halves, in pieces of an answer's reasons, JSON-escaped, split across streamed
events. The filter removes every run of ``PIECE`` or more characters of any secret (``MARK`` stands in its place),
in the secret's plain, JSON-escaped and URL-encoded forms; a secret shorter than ``PIECE`` is removed whole. The
transport runs every body, streamed event, error text and exception message through it before a parser, a cut, a
cache or a log sees it, so nothing downstream has to remember to.

Fast on the usual text, which holds no piece: a piece of ``PIECE`` characters always holds one of the secret's
``PIECE // 2``-character blocks at a position that is a multiple of ``PIECE // 2``, so a few substring searches
(C speed) rule a text out; only a text that holds a block is searched for the pieces themselves.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable
from typing import Any

__all__ = ["MARK", "PIECE", "SecretFilter"]

MARK = "[secret hidden]"
# The shortest run of a secret's characters that counts as a piece of it: long enough that text of its own rarely
# holds one (a 58-character key has 51 such runs), short enough that a key cut in halves, quarters or 20-character
# pieces is caught.
PIECE = 8
# A secret shorter than this is no secret worth masking (it would mask ordinary words).
SHORTEST = 4


def _forms(secret: str) -> set[str]:
    """The ways a secret appears in a server's text: as it is, JSON-escaped (with and without ``\\/``, ASCII or
    not) and URL-encoded (upper- and lower-case hex)."""
    escaped = json.dumps(secret)[1:-1]
    quoted = urllib.parse.quote(secret, safe="")
    return {
        secret,
        escaped,
        escaped.replace("/", "\\/"),
        json.dumps(secret, ensure_ascii=False)[1:-1],
        quoted,
        re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quoted),
    }


class SecretFilter:
    """Removes every piece of the given secrets from a text.

    Example:
        >>> key = "sk-proj-Zq8vN2xLrT5kW9mB3cY7hJ4dF6gS1aP0"
        >>> clean = SecretFilter([key]).clean
        >>> clean(f"bad key {key}"), clean(f"halves {key[:20]} and {key[20:]}"), clean("nothing here")
        ('bad key [secret hidden]', 'halves [secret hidden] and [secret hidden]', 'nothing here')
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = {form for secret in secrets if len(secret) >= SHORTEST for form in _forms(secret)}
        whole = sorted((f for f in forms if len(f) < PIECE), key=len, reverse=True)
        grams = {f[i : i + PIECE] for f in forms if len(f) >= PIECE for i in range(len(f) - PIECE + 1)}
        step = PIECE // 2
        blocks = {f[i : i + step] for f in forms if len(f) >= PIECE for i in range(0, len(f) - step + 1, step)}
        self._probes = sorted(blocks | set(whole))
        alternatives = "|".join(re.escape(g) for g in sorted(grams | set(whole), key=len, reverse=True))
        self._pieces = re.compile(f"(?=({alternatives}))") if alternatives else None

    def __bool__(self) -> bool:
        return self._pieces is not None

    def clean(self, text: str) -> str:
        """``text`` with every piece of every secret replaced by ``MARK``."""
        if self._pieces is None or not any(probe in text for probe in self._probes):
            return text
        spans: list[list[int]] = []
        for match in self._pieces.finditer(text):
            start, end = match.start(), match.start() + len(match.group(1))
            if spans and start <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([start, end])
        if not spans:
            return text
        parts, last = [], 0
        for start, end in spans:
            parts += [text[last:start], MARK]
            last = end
        return "".join([*parts, text[last:]])

    def clean_value(self, value: Any) -> Any:
        """A JSON-ready value with every string in it cleaned (keys too)."""
        if isinstance(value, str):
            return self.clean(value)
        if isinstance(value, list):
            return [self.clean_value(v) for v in value]
        if isinstance(value, dict):
            return {self.clean_value(k): self.clean_value(v) for k, v in value.items()}
        return value
