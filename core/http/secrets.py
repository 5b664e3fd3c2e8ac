"""Secrets: the key read by its variable's name, a URL's password kept out of what is shown, and ``SecretFilter``,
which takes every piece of a secret out of a text at the one place text from a server comes in. ``MARK`` is the one
marker that stands where a secret was, in every message, dump and log.

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
import logging
import os
import re
import urllib.parse
from collections.abc import Iterable
from typing import Any

from whileai.errors import BadInput

__all__ = [
    "MARK",
    "NOT_A_VARIABLE_NAME",
    "PIECE",
    "PLACEHOLDER_KEY",
    "SecretFilter",
    "check_key_variable",
    "hide_pasted_key",
    "masked_text",
    "masked_url",
    "query_secrets",
    "read_api_key",
    "split_credentials",
]

MARK = "[secret hidden]"
PLACEHOLDER_KEY = "EMPTY"  # what vLLM's own examples send when the server has no --api-key
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NOT_A_VARIABLE_NAME = f"<not a variable name: {MARK}>"  # what a pasted key is replaced with before validation
# The shortest run of a secret's characters that counts as a piece of it: long enough that text of its own rarely
# holds one (a 58-character key has 53 such runs), short enough that a key echoed in pieces of 6 characters or more
# (halves, quarters, a server's 7-character chunks) is caught.
PIECE = 6
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
        """``text`` with every piece of every secret replaced by ``MARK``, a piece split by whitespace (a key echoed
        in chunks of a few characters, spaced or on lines of their own) included."""
        if self._pieces is None or not any(probe in text for probe in self._probes):
            return text
        kept = [i for i, c in enumerate(text) if not c.isspace()]
        if len(kept) < len(text):  # pieces across whitespace first, while the chunks are whole
            squeezed = "".join(text[i] for i in kept)
            text = self._masked(text, [[kept[start], kept[end - 1] + 1] for start, end in self._spans(squeezed)])
        return self._masked(text, self._spans(text))

    def _spans(self, text: str) -> list[list[int]]:
        """Where pieces of the secrets stand in ``text``, overlapping ones merged."""
        spans: list[list[int]] = []
        assert self._pieces is not None
        for match in self._pieces.finditer(text):
            start, end = match.start(), match.start() + len(match.group(1))
            if spans and start <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([start, end])
        return spans

    @staticmethod
    def _masked(text: str, spans: list[list[int]]) -> str:
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


def split_credentials(base_url: str) -> tuple[str, str | None]:
    """``base_url`` without a ``user:password@``, and that ``user:password`` (percent-decoded), or None.

    Example:
        >>> split_credentials("https://me:s3cret@judge.example/v1")
        ('https://judge.example/v1', 'me:s3cret')
    """
    parts = urllib.parse.urlsplit(base_url)
    if parts.username is None and parts.password is None:
        return base_url, None
    netloc = parts.netloc.rpartition("@")[2]
    credentials = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), credentials


def masked_url(base_url: str) -> str:
    """``base_url`` with the password of a ``user:password@`` masked, for reprs, dumps and messages; a user name alone
    (``TOKEN@host``: a token given as the user) is masked whole, and so is a query parameter whose name says it
    carries a credential (``api_key``, ``token``, ``sig``).

    Example:
        >>> masked_url("https://me:s3cret@judge.example/v1"), masked_url("https://sk-token@judge.example/v1")
        ('https://me:[secret hidden]@judge.example/v1', 'https://[secret hidden]@judge.example/v1')
        >>> masked_url("https://judge.example/v1?api-version=1&api_key=s3cretvalue")
        'https://judge.example/v1?api-version=1&api_key=[secret hidden]'
    """
    try:
        parts = urllib.parse.urlsplit(base_url)
        password, username = parts.password, parts.username
    except ValueError:  # a netloc urllib cannot read (a bracket left open): whatever stands before an @ is masked
        head, at, _ = base_url.partition("://")[2].rpartition("@")
        return base_url.replace(head + at, f"{MARK}@", 1) if at else base_url
    if query_secrets(base_url):  # ?api_key=...: the value of a key, token or signature parameter
        query = "&".join(
            f"{name}={MARK}" if _SECRET_PARAMETER.search(name) else f"{name}={value}" if sep else name
            for name, sep, value in (item.partition("=") for item in parts.query.split("&"))
        )
        parts = parts._replace(query=query)
    if password is None and username is None:
        return urllib.parse.urlunsplit(parts)
    host = parts.netloc.rpartition("@")[2]
    shown = f"{username}:{MARK}" if password is not None else MARK
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{shown}@{host}"))


# A query parameter that carries a credential (Azure's api-key, a signed URL's sig, a token).
_SECRET_PARAMETER = re.compile(r"(?i)key|token|secret|passw|sig|auth|credential")


def query_secrets(base_url: str) -> list[str]:
    """The values of ``base_url``'s query parameters that carry a credential (decoded).

    Example:
        >>> query_secrets("https://x.example/v1?api-version=1&api-key=s3cretvalue")
        ['s3cretvalue']
    """
    try:
        pairs = urllib.parse.parse_qsl(urllib.parse.urlsplit(base_url).query, keep_blank_values=True)
    except ValueError:
        return []
    return [value for name, value in pairs if value and _SECRET_PARAMETER.search(name)]


# A URL as it stands in a text: a scheme, then everything up to a space, a quote or a brace (how YAML quotes it or
# closes a flow mapping around it).
_URL_IN_TEXT = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s\"'{}]*")


def masked_text(text: str) -> str:
    """``text`` (an override, a value quoted in a message) with every URL in it masked as :func:`masked_url` masks
    it, whether the URL stands bare, in YAML quotes or inside a flow mapping.

    Example:
        >>> masked_text('grader.judge.base_url="https://me:s3cret@judge.example/v1"')
        'grader.judge.base_url="https://me:[secret hidden]@judge.example/v1"'
        >>> masked_text("grader={judge: {base_url: http://me:s3cret@[bad/v1, model: m}}")
        'grader={judge: {base_url: http://[secret hidden]@[bad/v1, model: m}}'
    """
    return _URL_IN_TEXT.sub(lambda url: masked_url(url.group(0)), text) if "://" in text else text


def hide_pasted_key(data: Any) -> Any:
    """Settings ``data`` (a dict before validation) with an ``api_key_env`` that is no variable name replaced by
    :data:`NOT_A_VARIABLE_NAME`, so that no error message, even one formatted by an enclosing model, echoes a pasted
    key back.

    Example:
        >>> hide_pasted_key({"api_key_env": "sk-abc123"})["api_key_env"]
        '<not a variable name: [secret hidden]>'
    """
    if isinstance(data, dict):
        value = data.get("api_key_env")
        if isinstance(value, str) and not _ENV_NAME.match(value):
            data = {**data, "api_key_env": NOT_A_VARIABLE_NAME}
    return data


def check_key_variable(value: str | None) -> str | None:
    """``value`` checked to be the NAME of an environment variable (or None).

    Raises:
        ValueError: it is not a variable name (a key pasted in its place, say).
    """
    if value is not None and not _ENV_NAME.match(value):
        raise ValueError(
            "api_key_env must be the NAME of an environment variable (letters, digits, underscores), "
            "not the key itself; export the key and name its variable here"
        )
    return value


def read_api_key(api_key_env: str | None, *, field: str = "api_key_env") -> str:
    """The API key from the environment variable ``api_key_env`` names; a placeholder when it names none.

    Whitespace around the value (a secret made from a file ends in a newline) is stripped, with a one-line warning;
    any other control character would put a malformed header on the wire, so it is refused.

    Args:
        api_key_env: the variable's name, or None for a local server without a key.
        field: the setting's name as the user wrote it, for the message (``judge.api_key_env``).

    Raises:
        BadInput: the variable is named but not set, or its value holds a control character (the message names the
            variable, never a value).
    """
    if api_key_env is None:
        return PLACEHOLDER_KEY
    raw = os.environ.get(api_key_env)
    key = (raw or "").strip()
    if not key:
        state = (
            "which is not set"
            if raw is None
            else "which is set but empty (a CI secret that is missing, or not given to a fork's pull request?)"
        )
        raise BadInput(
            f"{field} names {api_key_env}, {state}: export {api_key_env}=... "
            "or leave api_key_env out for a local server without a key"
        )
    if key != raw:
        logging.getLogger("whileai.http.secrets").warning(
            "whileai: %s holds whitespace around the key (a newline from a file?); it is stripped", api_key_env
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise BadInput(f"{api_key_env} holds a control character inside the key: set it to the key alone")
    return key
