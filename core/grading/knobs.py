"""The knobs of groupwise grading and of the spread gate, each declared once: its default, its bounds, its meaning.

``GradingKnobs`` (mode, cap, min_factor, hack_zero, hack_reward, floor, timeout_s) is what ``GroupwiseGrading``
checks its arguments with, and the recipe's ``grading`` section is this model plus the rubrics; ``SpreadThresholds``
is what counts as spread, and the recipe's ``spread`` section is this model plus which rows to grade;
``WatchSettings`` is ``spread.watch``, the gate's checks repeated during training (``whileai.grading.watch``). A bound
written here holds for a recipe, an override, the command line and a Python caller alike.

Defaults come from ``whileai.defaults``, which names their sources. This module validates values; it grades nothing.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from whileai.defaults import (
    GRADER_TIMEOUT_S,
    GROUPWISE_CAP,
    GROUPWISE_FLOOR,
    GROUPWISE_HACK_ZERO,
    GROUPWISE_MIN_FACTOR,
    GROUPWISE_MODE,
    SPREAD_BROKEN_FRACTION,
    SPREAD_MAX_NEAR_MEDIAN,
    SPREAD_MAX_ORDERED_COPIES,
    SPREAD_MIN_AGREEMENT,
    SPREAD_MIN_MEASURED_CONTROLS,
    SPREAD_MIN_STD,
    SPREAD_TOLERANCE,
    WATCH_CONTROLS,
    WATCH_EVERY_STEPS,
    WATCH_MAX_EXTRA_CALLS,
    WATCH_PATIENCE,
)

__all__ = ["GradingKnobs", "Knob", "RecipeThresholds", "SpreadThresholds", "WatchSettings", "checked", "first_problem"]

Mode = Literal["advantage", "reward"]


class GradingKnobs(BaseModel):
    """How a grader's answers become rewards or advantages (the MiMo-V2.6 report's knobs, section 4.3).

    Example:
        >>> GradingKnobs(cap=2).min_factor
        0.5
    """

    # strict: a Python caller's True is no cap, and "2" is no number; YAML gives numbers as numbers.
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)

    mode: Mode = Field(GROUPWISE_MODE, description="'advantage' (GAR, section 4.3.2) or 'reward' (GRS, section 4.3.1).")
    cap: float = Field(
        GROUPWISE_CAP,
        ge=1,
        description="Upper bound on lambda in equation 3 (at least 1: lambda is never below 1; inf: none).",
    )
    min_factor: float = Field(
        GROUPWISE_MIN_FACTOR, gt=0, le=1, allow_inf_nan=False, description="Quality factor of the worst-ranked pass."
    )
    hack_zero: bool = Field(
        GROUPWISE_HACK_ZERO,
        description="Treat a confirmed hack as a failure: it gets a failure's reward (the lowest in its group, never "
        "above 0), so its advantage is the failures'.",
    )
    hack_reward: float | None = Field(
        None,
        allow_inf_nan=False,
        description="The reward a confirmed hack gets instead of a failure's (null: the lowest reward in its group, "
        "never above 0).",
    )
    floor: float = Field(
        GROUPWISE_FLOOR, ge=0, le=1, allow_inf_nan=False, description="Lower bound on each score in equation 2."
    )
    timeout_s: float | None = Field(
        GRADER_TIMEOUT_S,
        gt=0,
        description="The longest one call of a scripted or Python grader may take, in seconds (null: no limit); a "
        "call that runs over makes its group fall back, counted. The judge has its own timeout_s.",
    )

    def values(self) -> dict[str, Any]:
        """The knobs alone, as keyword arguments of ``GroupwiseGrading`` (a recipe's section has more fields)."""
        return {name: getattr(self, name) for name in GradingKnobs.model_fields}


class Knob:
    """An attribute of ``GroupwiseGrading`` that is one of its ``knobs``: read from them, and set through them, so a
    value set later is checked as one given at the start.

    Example:
        >>> from whileai import GroupwiseGrading
        >>> gar = GroupwiseGrading(grader=lambda group: {"ranking": []})
        >>> gar.cap = 0.5
        Traceback (most recent call last):
        ...
        ValueError: cap: Input should be greater than or equal to 1 (got 0.5); upper bound on lambda in equation 3 (at least 1: lambda is never below 1; inf: none).
    """  # noqa: E501

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, holder: Any, owner: type | None = None) -> Any:
        return self if holder is None else getattr(holder.knobs, self.name)

    def __set__(self, holder: Any, value: Any) -> None:
        try:
            setattr(holder.knobs, self.name, value)
        except ValidationError as error:
            raise ValueError(first_problem(error, GradingKnobs)) from None


class RecipeThresholds(BaseModel):
    """The thresholds a recipe's ``spread`` section sets (``whileai.config.schema.SpreadSection`` extends them)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    min_std: float = Field(
        SPREAD_MIN_STD, ge=0, allow_inf_nan=False, description="No spread below this std of the grader's scores."
    )
    tolerance: float = Field(
        SPREAD_TOLERANCE, ge=0, allow_inf_nan=False, description="Half-width of the band around the median."
    )
    max_near_median: float = Field(
        SPREAD_MAX_NEAR_MEDIAN, ge=0, le=1, description="No spread when more than this fraction lies in the band."
    )
    min_agreement: float = Field(
        SPREAD_MIN_AGREEMENT,
        ge=-1,
        le=1,
        description="No spread when the mean Kendall's tau between a group's two gradings is below this.",
    )
    max_ordered_copies: float = Field(
        SPREAD_MAX_ORDERED_COPIES,
        ge=0,
        le=1,
        description="No spread when more than this fraction of the controls' identical copies got different scores.",
    )
    broken_fraction: float = Field(
        SPREAD_BROKEN_FRACTION,
        gt=0,
        le=1,
        description="The grader is broken (exit 4, not 1) when its grading falls back on this fraction of the groups.",
    )


class SpreadThresholds(RecipeThresholds):
    """What counts as spread, and as a grader that reads content: the recipe's thresholds, and the share of control
    groups that must come back graded.

    Example:
        >>> SpreadThresholds(min_std=0.1).tolerance
        0.05
        >>> SpreadThresholds(min_std=-1)
        Traceback (most recent call last):
        ...
        ValueError: spread min_std: Input should be greater than or equal to 0 (got -1); no spread below this std of the grader's scores.
    """  # noqa: E501

    min_measured_controls: float = Field(
        SPREAD_MIN_MEASURED_CONTROLS,
        ge=0,
        le=1,
        description="'too few', never 'yes', when fewer than this fraction of the control groups sent came back "
        "graded (a control that falls back measures nothing).",
    )

    def __init__(self, *positional: float, **values: Any) -> None:
        # The fields in order, as the dataclass it was took them; one line naming the field on a bad value.
        names = list(type(self).model_fields)
        values.update(zip(names, positional, strict=False))
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise ValueError(first_problem(error, type(self), "spread ")) from None


def first_problem(error: ValidationError, model: type[BaseModel], prefix: str = "") -> str:
    """The first error on one line: the field, pydantic's words, the value given, and what the field is."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    field = model.model_fields.get(str(first["loc"][0])) if first["loc"] else None
    what = f"; {field.description[0].lower()}{field.description[1:]}" if field and field.description else ""
    return f"{prefix}{where}: {first['msg']} (got {first.get('input')!r}){what}"


def checked(model: type[BaseModel], **values: Any) -> Any:
    """``model(**values)``, its first error a one-line ``ValueError`` that names the field as a recipe's error does,
    and says what the field is.

    Example:
        >>> checked(GradingKnobs, cap=0.5)
        Traceback (most recent call last):
        ...
        ValueError: cap: Input should be greater than or equal to 1 (got 0.5); upper bound on lambda in equation 3 (at least 1: lambda is never below 1; inf: none).
    """  # noqa: E501
    try:
        return model(**values)
    except ValidationError as error:
        raise ValueError(first_problem(error, model)) from None


class WatchSettings(BaseModel):
    """``spread.watch``: the spread gate's checks repeated during training (the module docstring says what each
    check does and costs)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    enabled: bool = Field(True, description="Watch a grader arm's grading while it trains (a binary arm has none).")
    every_steps: int = Field(WATCH_EVERY_STEPS, ge=1, description="A check every this many optimizer steps.")
    window: int | None = Field(
        None, ge=1, description="The steps of graded groups a check reads (default: every_steps, each group once)."
    )
    controls: int = Field(
        WATCH_CONTROLS,
        ge=0,
        description="Control groups per check: graded groups shown to the grader again, shuffled, with a copy of "
        "one pass (one extra grader call each; 0: spread only).",
    )
    max_extra_calls: float = Field(
        WATCH_MAX_EXTRA_CALLS,
        ge=0,
        le=1,
        description="The controls' grader calls stay within this share of the grader calls training made; a check "
        "sends fewer controls, or none, to keep it.",
    )
    on_fail: Literal["warn", "stop"] = Field(
        "warn",
        description="'warn': say what failed, once per change; 'stop': also end the run at a checkpoint after "
        "patience failed checks in a row (whileai train exits 5).",
    )
    patience: int = Field(WATCH_PATIENCE, ge=1, description="Failed checks in a row that stop the run (on_fail: stop).")

    @model_validator(mode="after")
    def _window(self) -> WatchSettings:
        if self.window is None:
            object.__setattr__(self, "window", self.every_steps)
        return self
