"""``JudgeConfig``: every setting of the HTTP judge, as one strict pydantic model.

The recipe's ``grader: {kind: judge, judge: {...}}`` section is this model: unknown keys are errors, every field says
what it does, and the API key itself never appears here, only the name of the environment variable that holds it.
Its endpoint fields (URL, sampling, streaming, timeouts, retries, concurrency) and their checks are
``whileai.http.endpoint.EndpointSettings``'s, which it extends with the judge's own. This module
validates settings; it opens no connection, reads no environment variable and imports no HTTP client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from whileai.defaults import cache_dir
from whileai.http.endpoint import EndpointSettings

__all__ = ["JudgeConfig", "default_cache_dir"]


def default_cache_dir() -> Path:
    """``whileai.defaults.cache_dir("judge")``: ``$XDG_CACHE_HOME/whileai/judge`` by default."""
    return cache_dir("judge")


class JudgeConfig(EndpointSettings):
    """Where the judge lives and how hard the client tries (``whileai.http.endpoint.EndpointSettings``, every endpoint
    setting declared there once), and how the judge is asked.

    Example:
        >>> JudgeConfig(model="Qwen/Qwen3-8B").base_url
        'http://127.0.0.1:8000/v1'
    """

    structured_output: Literal["auto", "on", "off"] = Field(
        default="auto",
        description=(
            "Send a JSON schema as `response_format`: 'on' always, 'off' never (plain JSON parsing), 'auto' sends "
            "it and, for the rest of the run, steps down to a json_object (with the schema) and then to none each "
            "time the server refuses the form it got: an error whose text names response_format, a JSON schema or "
            "a grammar."
        ),
    )

    # ---- the answer
    answer_form: Literal["scores", "ranking", "probabilities"] = Field(
        default="scores",
        description=(
            "What the judge answers for a group: 'scores', an integer 0-10 per passing label (every label a "
            "required key, which a JSON-schema grammar enforces; equal scores are ties); 'probabilities', the same "
            "answer with each score read as its expected value under the judge's token probabilities (logprobs), "
            "so passes a sampled integer would tie are told apart (a score the server sends no probabilities for "
            "is read as written, and counted); or 'ranking', a best-first list of labels with ties as inner lists "
            "(no grammar can forbid a repeated or missing label). All become the same rank factors."
        ),
    )
    score_calls: Literal["group", "pass"] = Field(
        default="group",
        description=(
            "How the score forms ask: 'group', one call a group writes every pass's score; 'pass', one call a pass, "
            "each holding the whole group first and then the pass to score (the prompts' rate_one template), so no "
            "score is written after another, and a server that caches prefixes (llama.cpp, vLLM) reads the group "
            "once."
        ),
    )
    tie_within: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="With continuous scores (probabilities, or score_calls: pass), passes whose scores differ by at "
        "most this share of the scale's top tie (0.1 on a scale to 10): a smaller difference says nothing a judge "
        "could repeat; with permutations >= 2 the group's order noise, when larger, is the band instead.",
    )
    top_logprobs: int = Field(
        default=20,
        ge=1,
        le=20,
        description="With answer_form: probabilities, the alternatives asked at each token (20 is OpenAI's and vLLM's "
        "most).",
    )

    # ---- position bias
    permutations: int = Field(
        default=1,
        ge=1,
        le=8,
        description=(
            "Orders in which each group is shown (one call each); rankings are aggregated by mean rank and the "
            "agreement between orders (Kendall's tau) is reported in the stats. With continuous scores (probabilities, "
            "or score_calls: pass) a pass's score is its mean over the orders, and two passes whose means differ by "
            "less than the group's order noise (how far a pass's score moves between orders) are tied."
        ),
    )
    seed: int = Field(default=0, description="Seed of the rollout orders; an order depends on it and the group only.")

    # ---- prompts
    prompts: str = Field(
        default="v2",
        description=(
            "Prompt templates: a built-in version name (a file configs/judge/<name>.yaml: v2, the default; v3, pass by "
            "pass with no list of hacks, for a small local judge; v1) or the path of a YAML file with the same keys "
            "(version, system, rank, rubric, score, and rate for answer_form: scores; or extends: and what changes)."
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

    @model_validator(mode="after")
    def _calls_need_scores(self) -> JudgeConfig:
        if self.score_calls == "pass" and self.answer_form == "ranking":
            raise ValueError(
                "score_calls: pass asks each pass for a score: it needs answer_form scores or probabilities"
            )
        return self

    def cache_path(self) -> Path:
        """The sqlite file of the answer cache."""
        folder = Path(self.cache_dir).expanduser() if self.cache_dir is not None else default_cache_dir()
        return folder / "judge_cache.sqlite"
