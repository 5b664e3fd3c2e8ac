"""Scores read from the judge's token probabilities: the expected score at the token where the judge writes it.

A sampled integer keeps one draw of what the model believes; the probabilities of the score tokens at that place
keep all of it (G-Eval, arXiv 2303.16634): a pass the judge gives 8 with probability 0.6 and 9 with 0.4 scores 8.4,
and one it gives 8 with certainty scores 8.0, so two passes a sampled digit ties are told apart. The spread of the
distribution is kept beside its mean, so a confident score and a coin-flip are told apart too.

Servers return the probabilities in three shapes, all read here (:func:`reply_tokens`): the chat API's
``logprobs.content`` (OpenAI, vLLM, llama.cpp's server), the completion API's ``tokens``/``top_logprobs`` maps
(llama-cpp-python's chat completions), and llama.cpp's own ``completion_probabilities``. A streamed reply's pieces
are joined by the transport into the first shape.

Where the score is: the reply is JSON (a schema asks for it); :func:`number_offsets` walks the JSON object the
tokens spell and gives where each number starts, by its path (``("scores", "A")``), and :func:`score_at` reads the
alternatives of the token that holds that place. A score of several tokens ("10" as "1" then "0") is resolved by
the next position where the judge wrote its first digit; an alternative that could start a longer score the judge
did not write ("1" on a scale to 10, from a tokenizer that writes digit by digit) is left out, since it may be a 1
or a 10. A token whose text is raw bytes (part of a character) is read from its ``bytes``, so the reply's JSON
stays whole. Pure functions: nothing here calls a server.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["READING", "ScoreReading", "Token", "number_offsets", "reply_tokens", "score_at", "token_text"]

# The version of how a score is read from the probabilities, part of a cached answer's key: a change here must not
# be answered by answers read the old way.
READING = "expected-score/2"

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_LEADING_DIGITS = re.compile(r"\d+")
# How a server shows a token that is part of a character when it sends no bytes: "\xe2", or llama.cpp's "byte: \xe2".
_RAW_BYTE = re.compile(r"(?:byte: ?)?(?:\\x[0-9a-fA-F]{2})+")


@dataclass(frozen=True)
class Token:
    """One generated token: its text, its log probability and the alternatives the server gave at its place."""

    text: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class ScoreReading:
    """A score read at one place of the reply.

    Attributes:
        mean: the expected score under the probabilities of the valid scores at that place (renormalised).
        sd: their standard deviation (0: the judge was sure, or only the written score was seen).
        written: the score the judge wrote.
        mass: the probability the valid scores held before renormalising (how much of the judge's belief was
            read; low when the alternatives were mostly not scores).
        sampled: no alternative score was seen at that place: the written score stands, as a sampled one would.
    """

    mean: float
    sd: float
    written: int
    mass: float
    sampled: bool


def _finite(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return -math.inf
    return number if math.isfinite(number) else -math.inf


def _token_text(text: str, raw: Any = None) -> str:
    """A token's text as it stands in the reply: from its ``bytes`` where the server sends them (a token that is
    part of a character decodes to a replacement character, which keeps the JSON around it whole), a raw-byte
    spelling likewise, else as sent."""
    if isinstance(raw, list) and raw and all(isinstance(b, int) and 0 <= b < 256 for b in raw):
        return bytes(raw).decode("utf-8", errors="replace")
    return "\ufffd" if _RAW_BYTE.fullmatch(text) else text


def _chat_tokens(entries: Sequence[Any]) -> list[Token]:
    tokens = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            raise ValueError("a logprobs entry is not an object")
        alternatives = []
        for alt in entry.get("top_logprobs") or ():
            if isinstance(alt, Mapping) and isinstance(alt.get("token"), str):
                alternatives.append((alt["token"], _finite(alt.get("logprob"))))
        text = entry.get("token")
        if not isinstance(text, str):
            raise ValueError("a logprobs entry has no token text")
        tokens.append(Token(_token_text(text, entry.get("bytes")), _finite(entry.get("logprob")), tuple(alternatives)))
    return tokens


def _completion_tokens(logprobs: Mapping[str, Any]) -> list[Token]:
    texts, chosen = logprobs.get("tokens") or [], logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or []
    tokens = []
    for i, text in enumerate(texts):
        top = tops[i] if i < len(tops) and isinstance(tops[i], Mapping) else {}
        alternatives = tuple((str(k), _finite(v)) for k, v in top.items())
        tokens.append(Token(_token_text(str(text)), _finite(chosen[i] if i < len(chosen) else None), alternatives))
    return tokens


def _llama_tokens(entries: Sequence[Any]) -> list[Token]:
    """llama.cpp's ``completion_probabilities``: ``{content, probs: [{tok_str, prob}]}`` (older servers) or
    ``{token, logprob, top_logprobs}`` (newer)."""
    tokens = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            raise ValueError("a completion_probabilities entry is not an object")
        if "top_logprobs" in entry or "token" in entry:
            tokens += _chat_tokens([entry])
            continue
        text = _token_text(str(entry.get("content", "")))
        alternatives = []
        for alt in entry.get("probs") or ():
            if isinstance(alt, Mapping):
                p = _finite(alt.get("prob"))
                alternatives.append((str(alt.get("tok_str", "")), math.log(p) if p > 0 else -math.inf))
        own = next((lp for t, lp in alternatives if t == text), -math.inf)
        tokens.append(Token(text, own, tuple(alternatives)))
    return tokens


def reply_tokens(response: Mapping[str, Any]) -> list[Token] | None:
    """The generated tokens of a chat completion's first choice with their alternatives, in whichever shape the
    server sent them; None when it sent none (a server that does not return probabilities, or was not asked).

    Example:
        >>> response = {"choices": [{"logprobs": {"content": [
        ...     {"token": "7", "logprob": -0.4, "top_logprobs": [{"token": "7", "logprob": -0.4}]}]}}]}
        >>> reply_tokens(response)[0].text
        '7'
        >>> reply_tokens({"choices": [{"message": {"content": "7"}}]}) is None
        True
    """
    choices = response.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], Mapping) else {}
    logprobs = choice.get("logprobs")
    try:
        if isinstance(logprobs, Mapping) and isinstance(logprobs.get("content"), list) and logprobs["content"]:
            return _chat_tokens(logprobs["content"])
        if isinstance(logprobs, Mapping) and isinstance(logprobs.get("tokens"), list) and logprobs["tokens"]:
            return _completion_tokens(logprobs)
        legacy = response.get("completion_probabilities")
        if isinstance(legacy, list) and legacy:
            return _llama_tokens(legacy)
    except (TypeError, ValueError, AttributeError):  # a shape half like these: read as written, never a failure
        return None
    return None


def token_text(tokens: Sequence[Token]) -> str:
    """The text the tokens spell."""
    return "".join(token.text for token in tokens)


def number_offsets(text: str, start: int = 0) -> dict[tuple[str, ...], int]:
    """Where each number of the JSON value at ``text[start:]`` begins, by its path of keys (list positions as
    strings).

    Raises:
        ValueError: no JSON value starts there.

    Example:
        >>> text = '{"scores": {"A": 7, "B": 10}}'
        >>> offsets = number_offsets(text)
        >>> offsets[("scores", "B")], text[offsets[("scores", "B")]:][:2]
        (25, '10')
    """
    found: dict[tuple[str, ...], int] = {}

    def skip(pos: int) -> int:
        return _WS.match(text, pos).end()  # type: ignore[union-attr]

    def value(pos: int, path: tuple[str, ...]) -> int:
        pos = skip(pos)
        if pos >= len(text):
            raise ValueError("the text ends before a value")
        char = text[pos]
        if char in "{[":
            closing, index = ("}" if char == "{" else "]"), 0
            pos = skip(pos + 1)
            if text.startswith(closing, pos):
                return pos + 1
            while True:
                if char == "{":
                    if not text.startswith('"', pos):
                        raise ValueError(f"no key at {pos}")
                    key, pos = json.decoder.scanstring(text, pos + 1)
                    pos = skip(pos)
                    if not text.startswith(":", pos):
                        raise ValueError(f"no ':' at {pos}")
                    pos = value(pos + 1, (*path, key))
                else:
                    pos = value(pos, (*path, str(index)))
                    index += 1
                pos = skip(pos)
                if text.startswith(",", pos):
                    pos = skip(pos + 1)
                    continue
                if text.startswith(closing, pos):
                    return pos + 1
                raise ValueError(f"no ',' or {closing!r} at {pos}")
        if char == '"':
            return json.decoder.scanstring(text, pos + 1)[1]
        if number := _NUMBER.match(text, pos):
            found[path] = pos
            return number.end()
        for literal in ("true", "false", "null"):
            if text.startswith(literal, pos):
                return pos + len(literal)
        raise ValueError(f"no JSON value at {pos}")

    value(start, ())
    return found


def _token_at(tokens: Sequence[Token], offset: int) -> tuple[int, int]:
    """The index of the token that holds character ``offset`` of the text they spell, and where that token starts."""
    start = 0
    for i, token in enumerate(tokens):
        if start <= offset < start + len(token.text):
            return i, start
        start += len(token.text)
    raise ValueError(f"offset {offset} is past the tokens' text")


def _alternatives(token: Token) -> tuple[tuple[str, float], ...]:
    """The alternatives at a token's place, the written token among them once (most servers list it already)."""
    if any(text == token.text for text, _ in token.top):
        return token.top
    return ((token.text, token.logprob), *token.top)


def _candidates(token: Token, prefix: str) -> dict[str, float]:
    """The alternatives at ``token``'s place that spell ``prefix`` and then a digit, by the digits they add (their
    probabilities summed: a server may list two tokens that read the same)."""
    out: dict[str, float] = {}
    for text, logprob in _alternatives(token):
        if not text.startswith(prefix) or logprob == -math.inf:
            continue
        digits = _LEADING_DIGITS.match(text, len(prefix))
        if digits is not None:
            out[digits.group()] = out.get(digits.group(), 0.0) + math.exp(logprob)
    return out


def score_at(tokens: Sequence[Token], offset: int, top: int) -> ScoreReading:
    """The score whose first digit is character ``offset`` of the text ``tokens`` spell, read from the alternatives
    at that token: each alternative that continues the token's text before ``offset`` with digits reads as the
    score those digits make; scores outside 0..``top`` are left out and the rest renormalised.

    Raises:
        ValueError: ``offset`` is not a digit of the tokens' text.

    Example:
        >>> tokens = [Token('{"s": ', 0.0), Token("8", math.log(0.6), (("8", math.log(0.6)), ("9", math.log(0.4)))),
        ...           Token("}", 0.0)]
        >>> reading = score_at(tokens, 6, top=10)
        >>> round(reading.mean, 2), round(reading.sd, 2), reading.written
        (8.4, 0.49, 8)
    """
    index, start = _token_at(tokens, offset)
    text = token_text(tokens)
    written_digits = _LEADING_DIGITS.match(text, offset)
    if written_digits is None:
        raise ValueError(f"character {offset} of the reply is not a digit")
    written = int(written_digits.group())
    token = tokens[index]
    prefix = token.text[: offset - start]
    seen = _candidates(token, prefix) if token.top else {}
    # The written token's own text, once: a server lists it among the alternatives too.
    written_piece = _LEADING_DIGITS.match(token.text, len(prefix))
    own = written_piece.group() if written_piece else ""
    # The written number goes on in the next token when its digits end this one (Qwen writes 10 as "1", "0").
    goes_on = bool(written_piece) and written_piece.end() == len(token.text) and index + 1 < len(tokens)
    # A tokenizer that has a token for "10" lists it beside "1"; one that writes digit by digit cannot tell a 1 from
    # the start of a 10 the judge did not write, so such an alternative is left out rather than guessed.
    whole = any(len(digits) > 1 for digits in seen)
    weights: dict[int, float] = {}
    for digits, p in seen.items():
        if digits == own and goes_on and int(digits + "0") <= top:
            # The judge wrote these digits and a longer score could follow: the next place says how it ends.
            rest = _candidates(tokens[index + 1], "")
            stop = max(0.0, 1.0 - sum(rest.values()))
            for more, q in rest.items():
                if int(digits + more) <= top:
                    weights[int(digits + more)] = weights.get(int(digits + more), 0.0) + p * q
            if int(digits) <= top:
                weights[int(digits)] = weights.get(int(digits), 0.0) + p * stop
            continue
        if digits != own and not whole and int(digits + "0") <= top:
            continue  # a "1" that may be the first digit of a 10
        if int(digits) <= top:
            weights[int(digits)] = weights.get(int(digits), 0.0) + p
    mass = sum(weights.values())
    if mass <= 0 or set(weights) <= {written}:
        return ScoreReading(float(written), 0.0, written, mass, sampled=True)
    mean = sum(v * w for v, w in weights.items()) / mass
    var = sum(w * (v - mean) ** 2 for v, w in weights.items()) / mass
    return ScoreReading(mean, math.sqrt(max(var, 0.0)), written, mass, sampled=False)
