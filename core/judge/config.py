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

from pydantic import ConfigDict, Field, field_validator

from whileai.endpoint import EndpointChecks, EndpointSettings

__all__ = ["JUDGE_CONCURRENCY", "LOCAL_CONCURRENCY", "JudgeConfig", "default_cache_dir"]

# Judge calls in flight at once when the server does not say how many it runs (a hosted API, a vLLM without metrics):
# every call of a batch, up to this cap. A batch is one call per graded group and per order, rarely above a few
# hundred. 256 is vLLM's long-standing default max_num_seqs (newer versions raise it on large GPUs): a server that
# schedules that many at once answers a batch of 64 groups in about one call's latency (benchmarks/README.md, judge).
JUDGE_CONCURRENCY = 256

# Calls in flight at once against a server on this machine that says nothing of its slots: llama-cpp-python's server
# answers one request at a time (its C++ llama-server says how many in /props), and a call queued behind another is
# silent while it waits, so it would spend its timeout_s in the queue.
LOCAL_CONCURRENCY = 1


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
    stream: bool = Field(
        default=True,
        description=(
            "Stream each answer (`stream: true`): timeout_s then bounds the silence between two pieces of the answer, "
            "not the whole answer, so a slow judge that is writing never times out, and a call given up closes its "
            "connection, which stops the server's work on it. A server that answers in one piece is read as it is."
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
    timeout_s: float = Field(
        default=60.0,
        gt=0.0,
        description=(
            "Seconds a call may wait for the server's next piece of the answer (with stream: false, for the whole "
            "answer). The wait for the first piece includes the server reading the prompt."
        ),
    )
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
        description=(
            "A call still running this many seconds after it was first sent (retries included) is cancelled and its "
            "group falls back; time queued behind the concurrency limit does not count."
        ),
    )
    concurrency: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Most judge calls in flight at once, on one connection pool. None asks the server: llama.cpp's /props "
            "(total_slots) or /slots, vLLM's /metrics (which says it schedules many at once); a server on this "
            f"machine that says nothing gets {LOCAL_CONCURRENCY}, any other {JUDGE_CONCURRENCY} (every call of a "
            "training batch at once; 429s are retried)."
        ),
    )

    # ---- the answer
    answer_form: Literal["scores", "ranking"] = Field(
        default="scores",
        description=(
            "What the judge answers for a group: 'scores', an integer 0-10 per passing label (every label a "
            "required key, which a JSON-schema grammar enforces; equal scores are ties), or 'ranking', a best-first "
            "list of labels with ties as inner lists (no grammar can forbid a repeated or missing label). Both "
            "become the same rank factors."
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
        default="v2",
        description=(
            "Prompt templates: a built-in version name (a file configs/judge/<name>.yaml) or the path of a YAML file "
            "with the same keys (version, system, rank, rubric, score, and rate for answer_form: scores)."
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

    @field_validator("structured_output", mode="before")
    @classmethod
    def _yaml_switch(cls, value: object) -> object:
        # YAML reads a bare on/off (and yes/no, true/false) as a bool; the docs write them bare.
        if isinstance(value, bool):
            return "on" if value else "off"
        return value

    def endpoint_settings(self, concurrency: int | None = None) -> EndpointSettings:
        """The endpoint's share of these settings: where the judge lives, how it is sampled, how hard the client
        tries, with ``concurrency`` (the server's own figure when the config leaves it to the server). Taken as
        they are (this model checked them already, and a ``model_copy`` keeps its values)."""
        values = {name: getattr(self, name) for name in EndpointSettings.model_fields}
        values["concurrency"] = concurrency or self.concurrency or JUDGE_CONCURRENCY
        return EndpointSettings.model_construct(**values)

    def cache_path(self) -> Path:
        """The sqlite file of the answer cache."""
        folder = Path(self.cache_dir).expanduser() if self.cache_dir is not None else default_cache_dir()
        return folder / "judge_cache.sqlite"
