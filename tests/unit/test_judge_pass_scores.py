"""The parts of continuous judge scores: settings that go together, the one-pass template, the order noise, the
position figures, and reading a score where the reply's tokens do not line up with its text."""

from __future__ import annotations

import math

import pytest

from whileai.errors import BadInput
from whileai.judge import JudgeConfig, JudgeGrader, JudgeStats
from whileai.judge.pass_scores import assemble_scores, order_noise
from whileai.judge.probabilities import Token, number_offsets, score_at


def test_one_call_a_pass_needs_a_score_form_and_a_rate_one_template() -> None:
    with pytest.raises(ValueError, match="score_calls: pass asks each pass for a score"):
        JudgeConfig(model="m", answer_form="ranking", score_calls="pass")
    with pytest.raises(BadInput, match="no 'rate_one' template, which score_calls: pass needs: use prompts: v4"):
        JudgeGrader(JudgeConfig(model="m", score_calls="pass", prompts="v2", no_cache=True))


def test_order_noise_is_how_far_a_pass_moves_between_orders() -> None:
    assert order_noise([{0: 8.0, 1: 6.0}, {0: 7.0, 1: 6.5}], [0, 1]) == pytest.approx(0.75)
    assert order_noise([{0: 8.0}], [0]) is None


def test_two_orders_average_and_tie_what_the_reordering_moves() -> None:
    answers = [
        {"scores": {"A": 8.0, "B": 7.8, "C": 5.0}, "sd": {"A": 0.1, "B": 0.2, "C": 0.0}, "sampled": [], "hacks": [],
         "reasons": {}},
        {"scores": {"A": 7.6, "B": 8.0, "C": 5.2}, "sd": {"A": 0.1, "B": 0.2, "C": 0.0}, "sampled": ["C"], "hacks": [],
         "reasons": {}},
    ]  # fmt: skip
    labels = [{"A": 0, "B": 1, "C": 2}, {"A": 2, "B": 1, "C": 0}]  # the second order shows the group reversed
    answer, slots = assemble_scores([0, 1, 2], [[0, 1, 2], [2, 1, 0]], labels, answers)
    # Pass 0 scored 8.0 then 5.2 (shown first, then last), pass 2 5.0 then 7.6, pass 1 7.8 then 8.0.
    notes = answer["notes"]
    assert notes["scores"] == {"0": 6.6, "1": 7.9, "2": 6.3} and notes["as_written"] == 1
    assert notes["order_noise"] == pytest.approx((2.8 + 0.2 + 2.6) / 3, abs=1e-4)
    assert answer["ranking"] == [[1, 0, 2]]  # every difference is within what reordering moves: one tier
    assert len(slots) == 2 and slots[0][0][0] == 0


def test_position_figures_separate_a_slot_effect_from_differences_between_passes() -> None:
    follows, reads = JudgeStats(), JudgeStats()
    for _ in range(10):
        follows.count_slots([[(0, 1.0), (1, 0.0), (2, -1.0)]])  # whatever is shown first scores highest
        reads.count_slots([[(0, 1.0), (1, 0.0), (2, -1.0)], [(0, -1.0), (1, 0.0), (2, 1.0)]])
    slot = follows.position()
    assert slot is not None and slot["effect"] > 0.8 and slot["differences"] == pytest.approx(0.0)
    content = reads.position()
    assert content is not None and content["effect"] == pytest.approx(0.0) and content["differences"] > 0.8
    assert "mean score by display slot, less its order's mean: 1: +1.00" in str(follows)


def test_a_score_read_where_tokens_and_text_disagree_stays_as_written() -> None:
    with pytest.raises(ValueError, match="not a digit"):
        score_at([Token('{"s": x}', 0.0)], 6, top=10)
    with pytest.raises(ValueError):
        number_offsets('{"s": }')
    cut = [Token('{"s": ', 0.0), Token("9", math.log(0.5), (("9", math.log(0.5)), ("12", math.log(0.5))))]
    reading = score_at(cut, 6, top=10)  # an alternative above the top of the scale is left out
    assert reading.mean == 9 and reading.sampled


def test_a_1_that_may_start_a_10_is_left_out_unless_the_tokenizer_has_a_10() -> None:
    log = math.log
    lead = Token('{"s": ', 0.0)
    digit_by_digit = [lead, Token("9", log(0.6), (("9", log(0.6)), ("1", log(0.3)), ("8", log(0.1)))), Token("}", 0.0)]
    reading = score_at(digit_by_digit, 6, top=10)  # the "1" may be a 1 or the start of a 10: not guessed
    assert reading.mean == pytest.approx((9 * 0.6 + 8 * 0.1) / 0.7) and reading.mass == pytest.approx(0.7)
    whole_tens = [lead, Token("9", log(0.6), (("9", log(0.6)), ("10", log(0.3)), ("1", log(0.1)))), Token("}", 0.0)]
    assert score_at(whole_tens, 6, top=10).mean == pytest.approx(9 * 0.6 + 10 * 0.3 + 1 * 0.1)


def test_a_number_that_ends_in_its_token_reads_no_further() -> None:
    log = math.log
    tokens = [Token('{"s": ', 0.0), Token("1}", log(0.5), (("1}", log(0.5)), ("2}", log(0.5)))), Token("0", 0.0)]
    assert score_at(tokens, 6, top=10).mean == pytest.approx(1.5)


def test_a_token_that_is_part_of_a_character_keeps_the_json_whole() -> None:
    from whileai.judge.probabilities import reply_tokens

    seven, six = math.log(0.7), math.log(0.3)
    entries = [
        {"token": '{"reason": "', "logprob": 0.0, "top_logprobs": []},
        {"token": "\\xe2\\x80", "bytes": [0xE2, 0x80], "logprob": 0.0, "top_logprobs": []},  # half of a dash
        {"token": '", "score": ', "logprob": 0.0, "top_logprobs": []},
        {
            "token": "7",
            "logprob": seven,
            "top_logprobs": [{"token": "7", "logprob": seven}, {"token": "6", "logprob": six}],
        },
        {"token": "}", "logprob": 0.0, "top_logprobs": []},
    ]
    tokens = reply_tokens({"choices": [{"logprobs": {"content": entries}}]})
    assert tokens is not None
    offset = number_offsets("".join(t.text for t in tokens))[("score",)]
    assert score_at(tokens, offset, top=10).mean == pytest.approx(6.7)
