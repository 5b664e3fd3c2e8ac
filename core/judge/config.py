"""``JudgeConfig``: every setting of the HTTP judge, as one strict pydantic model.

The recipe's ``grader: {kind: judge, judge: {...}}`` section is this model: unknown keys are errors, every field says
what it does, and the API key itself never appears here, only the name of the environment variable that holds it.
``JudgeConfig.endpoint_settings()`` hands the endpoint's share of it (URL, sampling, timeouts, retries, concurrency)
to ``whileai.endpoint``, whose checks of the URL, the key's variable name and the backoff it shares. This module
validates settings; it opens no connection, reads no environment variable and imports no HTTP client.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field

from whileai.endpoint import EndpointChecks, EndpointSettings

__all__ = ["JUDGE_CONCURRENCY", "JudgeConfig", "default_cache_dir"]

# Judge calls in flight at once by default: every call of a batch, up to this cap. A batch is one call per graded group
# and per order, rarely above a few hundred. 256 is vLLM's long-standing default max_num_seqs (newer versions raise it
# on large GPUs): a local server schedules that many at once, so a batch of 64 groups takes about one call's latency
# instead of two waves of 32 (benchmarks/README.md, judge).
JUDGE_CONCURRENCY = 256


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/whileai/judge``, or ``~/.cache/whileai/judge`` when the variable is not set."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "whileai" / "judge"


class JudgeConfig(EndpointChecks):
    """Where the judge lives, how it is asked, and how hard the client tries.

    Example:
        >>> JudgeConfig(model="Qwen/Qwen3-8B").base_url
        'http://127.0.0.1:8000/v1'
    """

    # hide_input_in_errors: a key pasted into the wrong field must not be echoed back in the error.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, hide_input_in_errors=True)

    # ---- endpoint
    base_url: str = Field(
        default="http://127.0.0.1:8000/v1",
        description="Base URL of an OpenAI-compatible chat-completions server (vLLM, llama.cpp, OpenAI), up to /v1.",
    )
    model: str = Field(min_length=1, description="Model name the server serves, sent as the request's `model`.")
    api_key_env: str | None = Field(
        default=None,
        description=(
            "Name of the environment variable holding the API key (e.g. OPENAI_API_KEY), never the key itself. "
            "None sends a placeholder key, which a local vLLM server without --api-key accepts."
        ),
    )

    # ---- sampling
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Sampling temperature of every judge call.")
    max_tokens: int = Field(default=1024, ge=16, description="Most tokens the judge may write per answer.")
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Extra request fields sent as they are, e.g. {chat_template_kwargs: {enable_thinking: false}} for Qwen3 "
            "on vLLM, or {top_k: 1}."
        ),
    )
    structured_output: Literal["auto", "on", "off"] = Field(
        default="auto",
        description=(
            "Send a JSON schema as `response_format`: 'on' always, 'off' never (plain JSON parsing), 'auto' sends "
            "it and, for the rest of the run, steps down to a json_object (with the schema) and then to none each "
            "time the server refuses the form it got: an error whose text names response_format, a JSON schema or "
            "a grammar."
        ),
    )

    # ---- failures
    timeout_s: float = Field(default=60.0, gt=0.0, description="Wall-clock limit of one HTTP call, in seconds.")
    max_retries: int = Field(
        default=4,
        ge=0,
        description=(
            "Retries of one call after a connection error, a timeout, a 408, a 429, a 5xx or a 200 that is no chat "
            "completion (empty or cut body)."
        ),
    )
    backoff_base_s: float = Field(
        default=0.5, gt=0.0, description="First retry waits about this long; each later retry doubles it (jittered)."
    )
    backoff_max_s: float = Field(default=20.0, gt=0.0, description="Longest wait between two retries of a call.")
    batch_deadline_s: float = Field(
        default=600.0,
        gt=0.0,
        description="A batch's calls still running after this many seconds are cancelled and their groups fall back.",
    )
    concurrency: int = Field(
        default=JUDGE_CONCURRENCY,
        ge=1,
        description=(
            "Most judge calls in flight at once, on one connection pool. The default puts every call of a training "
            "batch in flight (a batch is one call per graded group, per order), so a batch takes about one call's "
            "latency; lower it for a server or a hosted API that refuses that many at once (429s are retried)."
        ),
    )

    # ---- position bias
    permutations: int = Field(
        default=1,
        ge=1,
        le=8,
        description=(
            "Orders in which each group is shown (one call each); rankings are aggregated by mean rank and the "
            "agreement between orders (Kendall's tau) is reported in the stats."
        ),
    )
    seed: int = Field(default=0, description="Seed of the rollout orders; an order depends on it and the group only.")

    # ---- prompts
    prompts: str = Field(
        default="v1",
        description=(
            "Prompt templates: a built-in version name (a file configs/judge/<name>.yaml) or the path of a YAML file "
            "with the same keys (version, system, rank, rubric, score)."
        ),
    )
    max_rollout_chars: int | None = Field(
        default=None,
        ge=200,
        description="Cut each rollout to this many characters (head and tail kept, the cut marked); None shows all.",
    )

    # ---- cache
    cache_dir: str | None = Field(
        default=None,
        description=(
            "Folder of the on-disk answer cache (judge_cache.sqlite); None uses $XDG_CACHE_HOME/whileai/judge. "
            "Point it at the run directory to keep a run's answers with the run."
        ),
    )
    no_cache: bool = Field(default=False, description="Neither read nor write the answer cache (--no-cache).")

    def endpoint_settings(self) -> EndpointSettings:
        """The endpoint's share of these settings: where the judge lives, how it is sampled, how hard the client
        tries. Taken as they are (this model checked them already, and a ``model_copy`` keeps its values)."""
        return EndpointSettings.model_construct(**{name: getattr(self, name) for name in EndpointSettings.model_fields})

    def cache_path(self) -> Path:
        """The sqlite file of the answer cache."""
        folder = Path(self.cache_dir).expanduser() if self.cache_dir is not None else default_cache_dir()
        return folder / "judge_cache.sqlite"
