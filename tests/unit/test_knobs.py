"""Each grading knob and spread threshold is declared once (``whileai.grading.knobs``): a recipe, an override and a
Python caller meet the same bounds, and the endpoint's settings are declared once for the judge and the offline path."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import whileai as wai
from whileai.config import load_recipe
from whileai.config.schema import GradingSection, SpreadSection
from whileai.errors import BadInput
from whileai.grading.knobs import GradingKnobs, RecipeThresholds, SpreadThresholds
from whileai.http.endpoint import EndpointSettings
from whileai.judge import JudgeConfig

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "refund_scripted.yaml"


def rank(group):
    return {"ranking": [g["index"] for g in group if g["passed"]]}


@pytest.mark.parametrize(
    ("knob", "value", "accepted"),
    [
        ("cap", math.inf, True),  # no cap at all
        ("cap", 1.0, True),
        ("cap", 0.5, False),
        ("min_factor", math.nan, False),
        ("min_factor", 1.0, True),
        ("floor", 1.5, False),
        ("timeout_s", 0.0, False),
        ("hack_reward", math.inf, False),
    ],
)
def test_a_knob_s_bounds_are_the_same_in_a_recipe_and_in_python(knob: str, value: float, accepted: bool) -> None:
    if accepted:
        assert getattr(wai.GroupwiseGrading(grader=rank, **{knob: value}), knob) == value
        assert getattr(load_recipe(RECIPE, [f"grading.{knob}={value}"]).recipe.grading, knob) == value
    else:
        with pytest.raises(ValueError, match=rf"^{knob}: .* \(got "):
            wai.GroupwiseGrading(grader=rank, **{knob: value})
        with pytest.raises(BadInput, match=rf"grading\.{knob}"):
            load_recipe(RECIPE, [f"grading.{knob}={value}"])


def test_the_recipe_sections_extend_the_knobs_and_declare_none_again() -> None:
    assert set(GradingKnobs.model_fields) < set(GradingSection.model_fields)
    assert set(RecipeThresholds.model_fields) < set(SpreadSection.model_fields)
    for name in GradingKnobs.model_fields:
        assert GradingSection.model_fields[name] is GradingKnobs.model_fields[name] or (
            GradingSection.model_fields[name].default == GradingKnobs.model_fields[name].default
        ), name
    # the gate's share of measured controls is the library's, not a recipe key (a resumed run's recipe reads the same)
    assert "min_measured_controls" in SpreadThresholds.model_fields
    assert "min_measured_controls" not in SpreadSection.model_fields


@pytest.mark.parametrize("override", ["spread.min_std=inf", "spread.tolerance=-1", "spread.broken_fraction=0"])
def test_a_bad_threshold_is_refused_naming_it(override: str) -> None:
    with pytest.raises(BadInput, match=override.split("=")[0].replace(".", r"\.")):
        load_recipe(RECIPE, [override])


def test_spread_thresholds_in_python_take_positions_and_fail_in_one_line() -> None:
    assert SpreadThresholds(0.1).min_std == 0.1 and SpreadThresholds(min_std=0.1).tolerance == 0.05
    with pytest.raises(ValueError) as caught:
        SpreadThresholds(min_std=-1)
    assert "\n" not in str(caught.value) and str(caught.value).startswith("spread min_std: ")
    assert load_recipe(RECIPE, ["spread.min_std=0.2"]).recipe.spread.thresholds() == SpreadThresholds(min_std=0.2)


def test_the_judge_s_endpoint_fields_are_the_endpoint_s() -> None:
    for name, declared in EndpointSettings.model_fields.items():
        assert JudgeConfig.model_fields[name].default == declared.default, name
        assert JudgeConfig.model_fields[name].description == declared.description, name
    assert JudgeConfig(model="m").stream is EndpointSettings(model="m").stream is True


def test_the_offline_clients_read_whole_answers_and_refuse_to_stream() -> None:
    from whileai.simulations.chat import endpoint_config

    assert endpoint_config("http://127.0.0.1:9/v1", "m", what="policy").stream is False
    with pytest.raises(BadInput, match="stream is not a setting"):
        wai.model_agent("http://127.0.0.1:9/v1", "m", stream=True)
    with pytest.raises(BadInput, match="bogus"):
        wai.model_agent("http://127.0.0.1:9/v1", "m", bogus=1)
