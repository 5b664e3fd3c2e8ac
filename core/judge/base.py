"""What the judge's roles share: the config, the prompts, the client, the cache key of a call, and how a failed call
is counted (``failure_reason``). ``JudgeGrader`` (``whileai.judge.grader``) and the reward-mode roles
(``whileai.judge.rubrics``) build on ``JudgeBase``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from whileai.judge.cache import cache_key
from whileai.judge.client import JudgeCallError, JudgeClient
from whileai.judge.probabilities import READING
from whileai.judge.prompts import load_prompts
from whileai.judge.replies import JudgeAnswerError
from whileai.judge.settings import JudgeConfig
from whileai.judge.usage import JudgeStats

__all__ = ["JudgeBase", "failure_reason"]


def failure_reason(error: Exception) -> str:
    if isinstance(error, JudgeCallError):
        return error.kind
    if isinstance(error, JudgeAnswerError):
        return "unusable answer"
    return type(error).__name__


class JudgeBase:
    """Config, prompts and client shared by the three judge roles."""

    def __init__(self, config: JudgeConfig | Mapping[str, Any], *, client: JudgeClient | None = None) -> None:
        self.config = config if isinstance(config, JudgeConfig) else JudgeConfig.model_validate(dict(config))
        self.prompts = load_prompts(self.config.prompts)
        self.client = client if client is not None else JudgeClient(self.config)
        self.name = f"judge:{self.config.model}"

    @property
    def stats(self) -> JudgeStats:
        """The judge's counters (shared with every role built on the same client)."""
        return self.client.stats

    def _key(self, kind: str, messages: list[dict[str, str]], schema: dict[str, Any], top_logprobs: int = 0) -> str:
        """The cache key of a call: everything that changes what is asked (the model, its sampling, the extra
        fields, how structured output is asked for and the schema, the prompts and the messages); not how it
        travels (streaming, timeouts, retries)."""
        config = self.config
        return cache_key(
            kind=kind,
            model=config.model,
            temperature=config.temperature,
            max_tokens=config.max_tokens,
            extra_body=config.extra_body,
            structured_output=config.structured_output,
            schema=schema,
            prompts=self.prompts.version,
            prompts_digest=self.prompts.digest,
            messages=messages,
            # How a score is read from the probabilities changes the answer stored: its version is in the key.
            **({"top_logprobs": top_logprobs, "reading": READING} if top_logprobs else {}),
        )

    def close(self) -> None:
        """Stop the judge's background loop and connection pool (also done at garbage collection)."""
        self.client.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.config.model!r}, base_url={self.config.base_url!r})"
