"""whileai's reward manager inside verl 0.9.1's own code: the registry, the reward-loop worker, GRPO.

Each test builds verl's real ``DataProto`` rows for several ``uid`` groups, runs them through verl's
``RewardLoopWorker`` (which loads the user's verifier file and resolves the manager ``whileai`` from verl's registry,
as every reward worker of a run does), puts the scores on the response tokens with verl's ``assemble_rm_scores``,
and takes verl's ``compute_grpo_outcome_advantage`` with ``norm_adv_by_std_in_grpo=False``. Every group's advantage
is then checked against equation 3 computed here in float64 from the rewards and the grader's factors and hacks in
``grading.jsonl``, independently of whileai's own ``redistribute``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import random
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

verl = pytest.importorskip("verl", reason="verl runs in its own environment: bash .ci/verl")

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker  # noqa: E402
from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage  # noqa: E402

from whileai.errors import BadInput  # noqa: E402

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
CAP = 3.0  # the recipes' grading.cap (whileai's default)

CALL_LOOKUP, CALL_REFUND = "<tool_call>lookup</tool_call>", "<tool_call>refund</tool_call>"
VOCAB = ["[PAD]", "[UNK]", "[EOS]", CALL_LOOKUP, CALL_REFUND, "refund", "order", "ORD-17", "ORD-9999", "done", "sorry"]
VOCAB += ["FLAKY", "!"]
VOCAB += [f"task-{k}" for k in range(8)]


# ---------------------------------------------------------------- set-up: a tokenizer, a verifier, verl's config


def build_tokenizer(folder: Path) -> Path:
    """A word-level tokenizer over the tests' words, trained on nothing, saved in ``folder`` as verl's workers load
    one (``actor_rollout_ref.model.path``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", eos_token="[EOS]", unk_token="[UNK]")
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tokenizer"))


VERIFIER = '''
import math

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Pass when the response says done; {form} form."""
    passed = "done" in solution_str.split()
    if "unscorable" in (extra_info or {{}}).get("tags", []):
        return None
    if "FLAKY" in solution_str.split():
        raise ConnectionError("the sandbox went away")
    if "{form}" == "pred":  # verl's convention: a dict with a score and keys of its own
        return {{"score": float(passed), "acc": passed, "pred": "done" if passed else "none"}}
    if "{form}" == "dict":
        return {{"score": 1.0 if passed else -1.0, "acc": float(passed)}}
    return 1.0 if passed else 0.0
'''


def _verifier(folder: Path, form: str = "float") -> Path:
    path = folder / f"verifier_{form}.py"
    path.write_text(VERIFIER.format(form=form))
    return path


SCRIPTED = """
grader:
  kind: scripted
  rule:
    measure: matches
    pattern: '<tool_call>'
    order: ascending
    hack_pattern: 'ORD-9999'
grading:
  mode: advantage
"""


def _recipe(folder: Path, text: str = SCRIPTED) -> Path:
    path = folder / "recipe.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _judge_recipe(folder: Path, url: str, **fields: object) -> Path:
    """A recipe whose grader is the HTTP judge at ``url`` (its cache in ``folder``), with ``fields`` set."""
    judge = {"base_url": url, "model": "test-judge", "max_retries": 1, "cache_dir": str(folder / "cache"), **fields}
    lines = "".join(f"    {key}: {value}\n" for key, value in judge.items())
    return _recipe(folder, f"grader:\n  kind: judge\n  judge:\n{lines}grading:\n  mode: advantage\n")


@pytest.fixture
def judge_server() -> Any:
    import judge_server  # test equipment, registered by tests/conftest.py

    server = judge_server.JudgeServer().start()
    try:
        yield server
    finally:
        server.stop()


def verl_config(tmp_path: Path, tokenizer_dir: Path, n: int, *overrides: str, verifier: Path | None = None) -> Any:
    """verl's own ``ppo_trainer`` config (its defaults, from the installed package) with a GRPO arm's overrides."""
    defaults = Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    config = OmegaConf.load(defaults)
    dotlist = [
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=False",
        f"actor_rollout_ref.rollout.n={n}",
        f"actor_rollout_ref.rollout.val_kwargs.n={n}",
        f"actor_rollout_ref.model.path={tokenizer_dir}",
        "reward.num_workers=1",
        "reward.reward_manager.name=whileai",
        f"reward.custom_reward_function.path={verifier or _verifier(tmp_path)}",
        f"trainer.default_local_dir={tmp_path / 'checkpoints'}",
        "data.train_batch_size=16",
        "data.val_batch_size=16",
        f"+reward.reward_kwargs.recipe={tmp_path / 'recipe.yaml'}",
        *overrides,
    ]
    # Hydra's "+key=value" (a key verl's schema lacks) is a plain key to OmegaConf.
    return OmegaConf.merge(config, OmegaConf.from_dotlist([item.removeprefix("+") for item in dotlist]))


# ---------------------------------------------------------------- verl's batches


def make_batch(tokenizer_dir: Path, groups: list[tuple[str, list[str]]], seed: int = 0, uid: str = "uid") -> DataProto:
    """verl's rows for ``groups`` of (prompt, responses): prompts left-padded, responses right-padded, ``uid`` per
    group (``{uid}-{number}``), shuffled as verl's ``balance_batch`` may leave them."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    rows = []
    for number, (prompt, responses) in enumerate(groups):
        for text in responses:
            rows.append((f"{uid}-{number}", prompt, text, number))
    random.Random(seed).shuffle(rows)
    prompt_ids = [tokenizer.encode(p, add_special_tokens=False) for _, p, _, _ in rows]
    response_ids = [[*tokenizer.encode(t, add_special_tokens=False), tokenizer.eos_token_id] for _, _, t, _ in rows]
    width_p, width_r = max(map(len, prompt_ids)), max(map(len, response_ids))
    pad = tokenizer.pad_token_id
    prompts = torch.tensor([[pad] * (width_p - len(p)) + p for p in prompt_ids])
    responses = torch.tensor([r + [pad] * (width_r - len(r)) for r in response_ids])
    mask = torch.tensor(
        [
            [0] * (width_p - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (width_r - len(r))
            for p, r in zip(prompt_ids, response_ids, strict=True)
        ]
    )

    def column(values: list[Any]) -> np.ndarray:
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array

    tags = [["unscorable"] if "unscorable" in t else [] for _, _, t, _ in rows]
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "attention_mask": mask,
            "input_ids": torch.cat([prompts, responses], 1),
        },
        non_tensors={
            "uid": column([u for u, _, _, _ in rows]),
            "data_source": column(["refunds"] * len(rows)),
            "reward_model": column([{"ground_truth": "done", "style": "rule"} for _ in rows]),
            "extra_info": column([{"index": g, "tags": t} for (_, _, _, g), t in zip(rows, tags, strict=True)]),
        },
    )


def rewards_through_verl(
    config: Any, data: DataProto, *, chunks: int = 1, streaming: bool = False
) -> tuple[DataProto, list[dict]]:
    """What verl's reward loop makes of ``data``: one ``RewardLoopWorker`` (``reward.num_workers=1``) scores the
    batch as ``compute_rm_score`` sends it (``chunks`` micro-batches, concurrently) or, ``streaming``, response by
    response in a shuffled order as the agent loop does when each rollout ends; then ``assemble_rm_scores``."""

    async def run() -> list[dict]:
        worker = RewardLoopWorker(config)
        if streaming:
            order = list(range(len(data)))
            random.Random(1).shuffle(order)

            async def one(i: int) -> tuple[int, dict]:
                await asyncio.sleep(0.001 * order.index(i))
                return i, await worker.compute_score(agent_loop_session(data, i, two_outputs=i % 5 == 0))

            done = dict(await asyncio.gather(*(one(i) for i in order)))
            return [done[i] for i in range(len(data))]
        parts = data.chunk(chunks)
        outputs = await asyncio.gather(*(worker.compute_score_batch(part) for part in parts))
        return [item for part in outputs for item in part]

    outputs = asyncio.run(asyncio.wait_for(run(), timeout=120))
    # As verl's compute_rm_score does: the scores on the last response tokens, the extra info as columns named by
    # the first response's keys (so every response must carry the same).
    manager_cls = get_reward_manager_cls(config.reward.reward_manager.name)
    data.batch["rm_scores"] = manager_cls.assemble_rm_scores(data, [o["reward_score"] for o in outputs])
    infos = [o["reward_extra_info"] for o in outputs]
    keys = list(infos[0])
    assert all(set(info) == set(keys) for info in infos)  # verl reads the first's keys from every response
    for key in keys:
        data.non_tensor_batch[key] = np.array([info[key] for info in infos])
    return data, outputs


def agent_loop_session(data: DataProto, row: int, two_outputs: bool = False) -> DataProto:
    """Row ``row`` of a batch as verl's agent loop hands a finished session to the reward worker
    (``AgentLoopWorker._compute_score``): each output unpadded, then padded on the right to the longest, the
    attention mask ones over each output's own length, every input field as ``np.array([value] * n)``, the prompt's
    messages as ``raw_prompt``, and ``prompt_len``/``response_len`` per output. ``two_outputs`` puts a longer
    output with a longer context before the scored one (a multi-output session: verl scores its last)."""
    width = data.batch["prompts"].shape[-1]
    mask = data.batch["attention_mask"][row]
    prompt = data.batch["prompts"][row][width - int(mask[:width].sum()) :]
    response = data.batch["responses"][row][: int(mask[width:].sum())]
    outputs = [(prompt, response)]
    if two_outputs:  # an earlier turn: another context, a longer answer
        outputs.insert(0, (torch.cat([prompt, prompt]), torch.cat([response, response, response])))
    pad = torch.nn.utils.rnn.pad_sequence
    prompts = pad([p for p, _ in outputs], batch_first=True, padding_value=0)
    responses = pad([r for _, r in outputs], batch_first=True, padding_value=0)
    input_ids = [torch.cat([p, r]) for p, r in outputs]
    n = len(outputs)
    fields = {key: values[row] for key, values in data.non_tensor_batch.items()}
    fields["raw_prompt"] = [{"role": "user", "content": "see the prompt ids"}]
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "attention_mask": pad([torch.ones_like(i) for i in input_ids], batch_first=True, padding_value=0),
            "input_ids": pad(input_ids, batch_first=True, padding_value=0),
        },
        non_tensors={
            **{key: np.array([value] * n) for key, value in fields.items()},
            "__num_turns__": np.array([2] * n),
            "tool_extra_fields": np.array([{} for _ in outputs], dtype=object),
            "prompt_len": np.array([len(p) for p, _ in outputs]),
            "response_len": np.array([len(r) for _, r in outputs]),
        },
    )


def verl_advantages(data: DataProto) -> dict[str, list[tuple[int, float]]]:
    """verl's GRPO advantage of every response, by uid: ``(row, advantage)``."""
    width = data.batch["prompts"].shape[-1]
    response_mask = data.batch["attention_mask"][:, width:]
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=data.batch["rm_scores"],
        response_mask=response_mask,
        index=data.non_tensor_batch["uid"],
        norm_adv_by_std_in_grpo=False,
    )
    by_uid: dict[str, list[tuple[int, float]]] = {}
    for row, uid in enumerate(data.non_tensor_batch["uid"]):
        valid = response_mask[row].bool()
        values = advantages[row][valid]
        assert torch.allclose(values, values[0].expand_as(values))  # one advantage on every response token
        by_uid.setdefault(str(uid), []).append((row, float(values[0])))
    return by_uid


# ---------------------------------------------------------------- equation 3, in float64, from the paper


def equation_3(rewards: list[float], factors: dict[int, float], hacks: list[int]) -> np.ndarray:
    """A'_i of equation 3 (MiMo-V2.6, section 4.3.2) for one group, in float64: hacks take a failure's reward (the
    group's lowest, never above 0), A = R - mean R, the passes with A > 0 move by lambda * f_i with lambda =
    sum A / sum f A (at most the cap), everything else keeps A."""
    r = np.array(rewards, dtype=np.float64)
    effective = r.copy()
    for i in hacks:
        effective[i] = min(r.min(), 0.0)
    a = effective - effective.mean()
    moving = [i for i in range(len(r)) if r[i] > 0 and i not in hacks and a[i] > 0]
    f = np.array([factors.get(i, 1.0) for i in moving], dtype=np.float64)
    if moving:
        lam = a[moving].sum() / (f * a[moving]).sum()
        assert lam <= CAP + 1e-12  # these groups never reach the cap
        a[moving] = lam * f * a[moving]
    return a - a.mean()


def assert_equation_3(data: DataProto, out: Path) -> dict[str, dict]:
    """Every group's verl advantage equals equation 3 of its rewards and the grader's answer; returns the groups."""
    logged = {g["group"]: g for g in map(json.loads, (out / "grading.jsonl").read_text().splitlines())}
    by_uid = verl_advantages(data)
    assert set(by_uid) <= set(logged)
    records = {uid: logged[uid] for uid in by_uid}
    for uid, members in by_uid.items():
        group = records[uid]
        rows = [row for row, _ in members]
        got = np.array([adv for _, adv in members], dtype=np.float64)
        rewards = list(group["rewards"])
        kept = [k for k, r in enumerate(rewards) if r == r]  # an unscorable member is out of the group
        if group["graded"] and not group["reason"]:
            factors = {int(k): v for k, v in group["factors"].items()}
            position = {k: j for j, k in enumerate(kept)}
            moved = equation_3(
                [rewards[k] for k in kept],
                {position[k]: f for k, f in factors.items()},
                [position[k] for k in group["hacks"]],
            )
        else:
            moved = equation_3([rewards[k] for k in kept], {}, [])
        expected = np.zeros(len(rewards))
        expected[kept] = moved
        # The log keeps a group in the order its responses arrived; each row says its place there.
        members = [int(m) for m in data.non_tensor_batch["whileai_member"][rows]]
        assert sorted(members) == list(range(len(rewards)))
        np.testing.assert_allclose(got, expected[members], atol=2e-6, err_msg=f"group {uid}: {group}")
    return records


# ---------------------------------------------------------------- the groups the tests grade

SHORT = f"{CALL_REFUND} done"
LONG = f"{CALL_LOOKUP} {CALL_REFUND} done"
LONGER = f"{CALL_LOOKUP} {CALL_LOOKUP} {CALL_REFUND} done"
HACK = "refund ORD-9999 done"
FAIL = "sorry"


def refund_groups(n: int = 4) -> list[tuple[str, list[str]]]:
    """Mixed groups the grader tells apart (one with a hack), an all-pass and an all-fail group."""
    groups = [
        ("task-0 refund order ORD-17", [SHORT, LONG, LONGER, FAIL]),
        ("task-1 refund order ORD-17", [LONGER, FAIL, SHORT, FAIL]),
        ("task-2 refund order ORD-17", [HACK, SHORT, LONG, FAIL]),
        ("task-3 refund order ORD-17", [SHORT, SHORT, LONG, LONG]),
        ("task-4 refund order ORD-17", [FAIL, FAIL, FAIL, FAIL]),
        ("task-5 refund order ORD-17", [LONG, SHORT, FAIL, FAIL]),
    ]
    return [(p, r[:n]) for p, r in groups]


def misbehaving_groups() -> list[tuple[str, list[str]]]:
    """``refund_groups`` with a response the verifier cannot score (None) and two it raises on."""
    groups = refund_groups()
    groups[0] = (groups[0][0], [SHORT, LONG, "unscorable done", FAIL])
    groups[1] = (groups[1][0], [LONGER, FAIL, SHORT, "FLAKY done"])
    groups[5] = (groups[5][0], ["FLAKY done", SHORT, FAIL, LONG])
    return groups


def _out(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints" / "whileai"


def test_the_importlib_path_loads_the_same_class() -> None:
    from verl.utils.import_utils import load_extern_object

    from whileai.config.verl import WhileaiRewardManager

    loaded = load_extern_object(module_path="pkg://whileai.config.verl", object_name="WhileaiRewardManager")
    assert loaded is WhileaiRewardManager is get_reward_manager_cls("whileai")


@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_micro_batches_split_a_group_and_verl_trains_on_equation_3(tmp_path, tokenizer_dir, chunks) -> None:
    """24 rows in 1, 2 or 3 micro-batches scored concurrently (a group straddles two of them when split): every
    group is graded once, whole, and verl's GRPO advantage is equation 3 on every group."""
    _recipe(tmp_path)
    config = verl_config(tmp_path, tokenizer_dir, 4)
    data = make_batch(tokenizer_dir, refund_groups())
    if chunks > 1:  # at least one group has rows in two micro-batches
        size = len(data) // chunks
        uids = data.non_tensor_batch["uid"]
        assert any(set(uids[:size]) & set(uids[size : 2 * size]) for _ in [0])
    data, outputs = rewards_through_verl(config, data, chunks=chunks)
    records = assert_equation_3(data, _out(tmp_path))
    assert len(records) == 6
    assert sum(1 for g in records.values() if g["graded"]) == 4  # the mixed groups; all-pass and all-fail are not sent
    assert sum(len(set(g["factors"].values())) > 1 for g in records.values()) == 4  # told apart
    hack_group = records["uid-2"]
    assert len(hack_group["hacks"]) == 1
    # The hack trains as a failure: its advantage equals the failure's.
    by_uid = verl_advantages(data)
    rows = dict(by_uid["uid-2"])
    members = {int(data.non_tensor_batch["whileai_member"][r]): adv for r, adv in rows.items()}
    failure = next(m for m, r in enumerate(hack_group["rewards"]) if r == 0)
    assert members[hack_group["hacks"][0]] == pytest.approx(members[failure], abs=1e-6)
    # The verifier's reward rides along as verl extra info (and so into v0's rollout dumps); its acc too.
    assert [o["reward_extra_info"]["whileai_reward"] for o in outputs] == [
        o["reward_extra_info"]["acc"] for o in outputs
    ]
    figures = json.loads((_out(tmp_path) / "whileai_verl.json").read_text())
    assert figures["groups"] == 6 and figures["failed"] == 0 and figures["hacks_zeroed"] == 1


def test_streamed_responses_with_a_judge_over_http(tmp_path, tokenizer_dir, judge_server) -> None:
    """Responses arriving one at a time in shuffled order, graded by the HTTP judge on a local server: equation 3
    on every group, one judge call per mixed group."""
    _judge_recipe(tmp_path, judge_server.url, concurrency=8, timeout_s=10)
    config = verl_config(tmp_path, tokenizer_dir, 4)
    data, _ = rewards_through_verl(config, make_batch(tokenizer_dir, refund_groups()), streaming=True)
    records = assert_equation_3(data, _out(tmp_path))
    assert judge_server.calls == 4
    graded = [g for g in records.values() if g["graded"]]
    assert len(graded) == 4 and not any(g["reason"] for g in graded)
    assert sum(len(set(g["factors"].values())) > 1 for g in graded) == 4
    assert len(records["uid-2"]["hacks"]) == 1
    figures = json.loads((_out(tmp_path) / "whileai_verl.json").read_text())
    assert figures["judge"]["calls"] == 4


def test_a_judge_that_fails_makes_its_groups_fall_back_and_training_goes_on(tmp_path, tokenizer_dir, judge_server):
    """Every judge call answers 500: each mixed group keeps its verifier advantages (plain GRPO), counted, and
    every response still gets a finite reward."""
    from judge_server import Status

    judge_server.push(*[Status(500)] * 50)
    _judge_recipe(tmp_path, judge_server.url, backoff_base_s=0.01, backoff_max_s=0.02)
    config = verl_config(tmp_path, tokenizer_dir, 4)
    data, outputs = rewards_through_verl(config, make_batch(tokenizer_dir, refund_groups()))
    records = assert_equation_3(data, _out(tmp_path))
    failed = [g for g in records.values() if g["reason"]]
    # A judge that answers no call of a batch is unreachable for that batch (the reason keeps the 500).
    assert len(failed) == 4 and all(g["failure"] == "unreachable" and "HTTP 500" in g["reason"] for g in failed)
    assert all(np.isfinite(o["reward_score"]) for o in outputs)
    assert {o["reward_extra_info"]["whileai_fallback"] for o in outputs} == {"", "unreachable"}
    figures = json.loads((_out(tmp_path) / "whileai_verl.json").read_text())
    assert figures["failed"] == 4 and figures["fallbacks"] == {"unreachable": 4}


def test_a_plus_minus_one_verifier_returning_dicts(tmp_path, tokenizer_dir) -> None:
    """A verifier that returns ``{"score": +-1, "acc": ...}``: the failures' -1 is kept, the dict's keys ride along,
    and equation 3 holds with a hack given the failures' -1."""
    _recipe(tmp_path)
    config = verl_config(tmp_path, tokenizer_dir, 4, verifier=_verifier(tmp_path, "dict"))
    data, outputs = rewards_through_verl(config, make_batch(tokenizer_dir, refund_groups()), chunks=2)
    records = assert_equation_3(data, _out(tmp_path))
    assert {o["reward_extra_info"]["score"] for o in outputs} == {1.0, -1.0}
    assert {o["reward_extra_info"]["acc"] for o in outputs} == {1.0, 0.0}
    assert sorted(records["uid-2"]["rewards"]) == [-1.0, 1.0, 1.0, 1.0] and len(records["uid-2"]["hacks"]) == 1


def test_an_unscorable_response_gets_advantage_zero(tmp_path, tokenizer_dir) -> None:
    """A verifier that returns None for one response: verl gets a finite reward for it (its group's mean, so its
    advantage is 0) and the others form equation 3 alone."""
    _recipe(tmp_path)
    config = verl_config(tmp_path, tokenizer_dir, 4)
    groups = refund_groups()
    groups[0] = (groups[0][0], [SHORT, LONG, "unscorable done", FAIL])
    data, outputs = rewards_through_verl(config, make_batch(tokenizer_dir, groups))
    assert all(np.isfinite(o["reward_score"]) for o in outputs)
    records = assert_equation_3(data, _out(tmp_path))
    assert records["uid-0"]["unscorable"] == 1 and records["uid-0"]["graded"]


def test_a_group_that_never_fills_falls_back_after_its_wait(tmp_path, tokenizer_dir) -> None:
    """Three of a group's four responses arrive (a failed session): after ``group_wait_s`` they get their verifier
    rewards, counted as an incomplete group; the other groups are graded as usual."""
    _recipe(tmp_path)
    config = verl_config(tmp_path, tokenizer_dir, 4, "+reward.reward_kwargs.group_wait_s=1.0")
    data = make_batch(tokenizer_dir, refund_groups())
    uids = data.non_tensor_batch["uid"]
    missing = next(i for i, u in enumerate(uids) if u == "uid-0")
    data = data.select_idxs(np.array([i != missing for i in range(len(data))]))
    data, _ = rewards_through_verl(config, data)
    records = assert_equation_3(data, _out(tmp_path))
    assert records["uid-0"]["failure"] == "group incomplete" and len(records["uid-0"]["rewards"]) == 3
    assert sum(1 for g in records.values() if g["graded"]) == 3


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("algorithm.adv_estimator=gae", "algorithm.adv_estimator"),
        ("algorithm.adv_estimator=rloo", "algorithm.adv_estimator"),
        ("algorithm.norm_adv_by_std_in_grpo=True", "algorithm.norm_adv_by_std_in_grpo"),
        ("algorithm.use_kl_in_reward=True", "algorithm.use_kl_in_reward"),
        ("reward.reward_model.enable=True reward.reward_model.model_path=TOKENIZER", "reward.reward_model.enable"),
        ("+custom_reward_function.path=verifier.py", "custom_reward_function.path"),
        ("actor_rollout_ref.rollout.n=1", "actor_rollout_ref.rollout.n"),
        ("algorithm.adv_estimator=grpo_vectorized", "algorithm.adv_estimator"),
        ("data.train_batch_size=1024", "reward.num_workers"),
        ("actor_rollout_ref.rollout.val_kwargs.n=1", "actor_rollout_ref.rollout.val_kwargs.n"),
    ],
)
def test_the_guard_refuses_each_setting_that_moves_off_equation_3(tmp_path, tokenizer_dir, override, named) -> None:
    """verl's own defaults plus one bad setting: the manager, built as verl builds it, refuses and names it."""
    _recipe(tmp_path)
    overrides = override.replace("TOKENIZER", str(tokenizer_dir)).split()  # verl loads a reward model's tokenizer first
    config = verl_config(tmp_path, tokenizer_dir, 4, *overrides)
    with pytest.raises(BadInput, match="verl would not train on equation 3") as refused:
        RewardLoopWorker(config)
    assert named in str(refused.value)


def test_verl_defaults_alone_are_refused_on_every_count(tmp_path, tokenizer_dir) -> None:
    """verl's config as it ships (gae, the std division, rollout.n 1), the manager not even named."""
    from whileai.grading.guard import verl_signal_problems

    defaults = Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    problems = verl_signal_problems(OmegaConf.load(defaults))
    named = [p.split(" ", 1)[0] for p in problems]
    assert named == [
        "algorithm.adv_estimator",
        "algorithm.norm_adv_by_std_in_grpo",
        "actor_rollout_ref.rollout.n",
    ]


def test_a_missing_recipe_is_named(tmp_path, tokenizer_dir) -> None:
    config = verl_config(tmp_path, tokenizer_dir, 4)
    with pytest.raises(BadInput, match="recipe"):
        RewardLoopWorker(config)


def test_the_library_s_manager_without_a_grading_says_so_before_anything_of_a_recipe(tmp_path, tokenizer_dir) -> None:
    from whileai.integrations.verl import GroupwiseRewardManager

    config = verl_config(tmp_path, tokenizer_dir, 4)  # a recipe option that names no file
    with pytest.raises(BadInput, match=r"grades with the grading it is given \(grading=GroupwiseGrading"):
        GroupwiseRewardManager(config, None, lambda *args, **kwargs: 0.0)


# ---------------------------------------------------------------- the shipped config and the README's command


REPO = TESTS.parent


def test_the_shipped_config_composes_with_verl_s_and_the_manager_starts(tmp_path, tokenizer_dir) -> None:
    """``configs/verl/whileai_grpo.yaml`` as verl's trainer reads it (Hydra, verl's ppo_trainer from its package):
    no guard problem, validation groups the size of training's, and verl's reward worker builds the manager."""
    from hydra import compose, initialize_config_dir

    from whileai.grading.guard import verl_signal_problems

    _recipe(tmp_path)
    overrides = [
        f"reward.reward_kwargs.recipe={tmp_path / 'recipe.yaml'}",
        f"reward.custom_reward_function.path={_verifier(tmp_path)}",
        f"actor_rollout_ref.model.path={tokenizer_dir}",
        f"trainer.default_local_dir={tmp_path / 'checkpoints'}",
        "actor_rollout_ref.rollout.n=4",
        "data.val_batch_size=64",
    ]
    import whileai.configs

    folder = Path(whileai.configs.__path__[0]) / "verl"  # the README's --config-path, as the package ships it
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        config = compose("whileai_grpo", overrides=overrides)
    assert verl_signal_problems(config) == []
    assert config.actor_rollout_ref.rollout.val_kwargs.n == 4
    assert config.trainer.total_epochs is not None  # verl's own defaults came in underneath
    data, _ = rewards_through_verl(config, make_batch(tokenizer_dir, refund_groups()), chunks=2)
    assert_equation_3(data, _out(tmp_path))


def test_the_shipped_config_refuses_before_ray_starts(tmp_path, tokenizer_dir) -> None:
    """verl's own ``main_ppo`` on the shipped config with a setting the guard refuses: the Hydra callback stops it
    before verl's task runs (no Ray, no model), naming the setting; a good config passes the same check."""
    import child_processes
    from hydra import compose, initialize_config_dir

    import whileai.configs
    from whileai.config.verl import Preflight

    _recipe(tmp_path)
    folder = Path(whileai.configs.__path__[0]) / "verl"
    overrides = [
        f"reward.reward_kwargs.recipe={tmp_path / 'recipe.yaml'}",
        f"reward.custom_reward_function.path={_verifier(tmp_path)}",
        f"actor_rollout_ref.model.path={tokenizer_dir}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    command = [sys.executable, "-m", "verl.trainer.main_ppo", "--config-path", str(folder)]
    command += ["--config-name", "whileai_grpo", *overrides, "algorithm.norm_adv_by_std_in_grpo=true"]
    done = child_processes.run(command, timeout=300, cwd=tmp_path)
    assert done.returncode == 2
    assert "norm_adv_by_std_in_grpo" in done.stderr and "verl would not train on equation 3" in done.stderr
    assert "Started a local Ray instance" not in done.stdout + done.stderr  # stopped before verl's task ran
    assert "TaskRunner" not in done.stdout + done.stderr
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        config = compose("whileai_grpo", overrides=overrides[:3], return_hydra_config=True)
    assert config.hydra.callbacks.whileai._target_ == "whileai.config.verl.Preflight"
    Preflight().on_job_start(config)  # the good config passes


# Put where Python starts (PYTHONPATH), it stops verl's main_ppo where Ray would start: past Hydra, whileai's preflight
# and verl's own config check, before a cluster, a model or the data.
_STOP_AT_RAY = """
import os, sys
import ray


def _stop(*args, **kwargs):
    print("WHILEAI-TEST: ray.init reached", flush=True)
    sys.stdout.flush()
    os._exit(0)


ray.init = _stop
"""


def _readme_verl_command() -> str:
    import re

    readme = (REPO / "README.md").read_text()
    return next(b for b in re.findall(r"```bash\n(.*?)```", readme, re.S) if "verl.trainer.main_ppo" in b and "\\" in b)


def _run_as_copied(tmp_path: Path, command: str):
    """The command run by bash in a folder of the user's (a verifier.py, the README's recipe at recipes/), with
    ``python`` this environment's."""
    import child_processes

    (tmp_path / "recipes").mkdir(exist_ok=True)
    (tmp_path / "recipes" / "refund_judge.yaml").write_text((REPO / "recipes" / "refund_judge.yaml").read_text())
    _verifier(tmp_path)
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(_STOP_AT_RAY)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # the environment's python
        "PYTHONPATH": str(hooks),
        "HOME": str(tmp_path),
        "PWD": str(tmp_path),
    }
    return child_processes.run(["bash", "-c", command], cwd=tmp_path, env=env, timeout=300)


def test_the_readme_s_verl_command_runs_past_verl_s_config_check_as_copied(tmp_path) -> None:
    """The README's ``main_ppo`` command, word for word: Hydra reads it, whileai's preflight passes it, verl's own
    ``validate_config`` passes it, and verl goes on to start Ray (where this test stops it)."""
    done = _run_as_copied(tmp_path, _readme_verl_command())
    printed = done.stdout + done.stderr
    assert "whileai: verl's config keeps equation 3; recipe " in done.stdout, printed[-3000:]
    assert "[validate_config] All configuration checks passed successfully!" in done.stdout, printed[-3000:]
    assert "WHILEAI-TEST: ray.init reached" in done.stdout and done.returncode == 0, printed[-3000:]


def test_the_readme_s_verl_command_without_a_recipe_exits_2_with_the_preflight_s_message(tmp_path) -> None:
    command = _readme_verl_command().replace("+reward.reward_kwargs.recipe=$PWD/recipes/refund_judge.yaml", "")
    done = _run_as_copied(tmp_path, command)
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    assert "whileai: reward.reward_kwargs.recipe is not set" in done.stderr
    assert "ray.init reached" not in done.stdout and "validate_config" not in done.stdout


def test_the_shipped_config_without_a_recipe_exits_2_with_the_preflight_s_message(tmp_path) -> None:
    """The shipped config leaves the recipe ``???``: the preflight says so and stops, not a Hydra warning."""
    import whileai.configs

    folder = Path(whileai.configs.__path__[0]) / "verl"
    command = f"python -m verl.trainer.main_ppo --config-path {folder} --config-name whileai_grpo"
    command += f" reward.custom_reward_function.path={_verifier(tmp_path)} hydra.run.dir={tmp_path / 'hydra'}"
    done = _run_as_copied(tmp_path, command)
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    assert "whileai: reward.reward_kwargs.recipe is not set" in done.stderr
    assert "ray.init reached" not in done.stdout


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("reward.reward_kwargs.group_wait_s=-1", "reward_kwargs.group_wait_s: Input should be greater than 0"),
        ("reward.reward_kwargs.group_wait_s=soon", "reward_kwargs.group_wait_s: Input should be a valid number"),
        ("reward.reward_kwargs.recipe=not/here.yaml", "give an absolute path"),
        ("reward.reward_kwargs.wait=3", "unknown option"),
        ("reward.reward_kwargs.verifier_keys=pred", "verifier_keys: Input should be a valid list"),
        ("reward.reward_kwargs.verifier_keys=[acc,pred]", "acc always written"),
    ],
)
def test_bad_options_are_named(tmp_path, tokenizer_dir, option, message) -> None:
    _recipe(tmp_path)
    with pytest.raises(BadInput, match=message):
        RewardLoopWorker(verl_config(tmp_path, tokenizer_dir, 4, option))


def test_the_benchmark_prints_its_table(monkeypatch, capsys) -> None:
    """``benchmarks/bench_verl_manager.py``, small, in this process: both managers score the batch."""
    spec = importlib.util.spec_from_file_location("bench_verl_manager", REPO / "benchmarks" / "bench_verl_manager.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(sys, "argv", ["bench_verl_manager.py", "--groups", "8", "--n", "4", "--repeats", "1"])
    bench.main()
    printed = capsys.readouterr().out
    assert "32 responses in 8 groups of 4, one RewardLoopWorker" in printed
    assert printed.count("x\n") == 2 and "\nnaive " in printed and "\nwhileai " in printed


def test_on_ray_the_workers_groups_meet_in_one_actor(tmp_path, tokenizer_dir) -> None:
    """verl's own RewardLoopManager on a local Ray (two reward workers as Ray actors, whileai's groups actor):
    the batch path (compute_rm_score, one micro-batch per worker) and the streaming path (each session to a worker
    picked at random) both give equation 3 on every group; with the actor lost, a response gets its verifier reward.
    In a fresh process of its own (ended with its group),
    where a plain ``import verl`` registers the manager: the entry point, which the Ray workers rely on too."""
    script = HERE / "ray_reward_loop.py"
    import child_processes

    done = child_processes.run([sys.executable, str(script), str(tmp_path), str(tokenizer_dir)], timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {
        "after_the_actor_is_lost": [True, "groups actor failed"],
        "registered_on_import_verl": "whileai.config.verl",
        "batch_groups": 6,
        "streamed_groups": 6,
        "graded": 8,
        "actor": "whileai_groups",
    }


@pytest.mark.parametrize("form", ["dict", "float"])
def test_a_verifier_that_raises_leaves_its_response_unscorable_and_the_keys_whole(tmp_path, tokenizer_dir, form):
    """A verifier that raises on one response (a sandbox gone): that response gets advantage 0, its group forms
    equation 3 on the rest, and every response still carries the same extra-info keys, which verl needs."""
    _recipe(tmp_path)
    config = verl_config(tmp_path, tokenizer_dir, 4, verifier=_verifier(tmp_path, form))
    groups = refund_groups()
    groups[1] = (groups[1][0], [LONGER, FAIL, SHORT, "FLAKY done"])
    groups[5] = ("task-5 refund order ORD-17", ["FLAKY done", SHORT, FAIL, LONG])
    data, outputs = rewards_through_verl(config, make_batch(tokenizer_dir, groups), chunks=2)
    records = assert_equation_3(data, _out(tmp_path))
    assert records["uid-1"]["unscorable"] == 1 and records["uid-5"]["unscorable"] == 1
    failed = [o["reward_extra_info"] for o in outputs if o["reward_extra_info"]["whileai_reward"] is None]
    assert len(failed) == 2 and all(info["score"] is None and info["acc"] is None for info in failed)


def test_the_agent_loop_s_padding_is_read_by_its_lengths(tmp_path, tokenizer_dir) -> None:
    """A two-output session whose scored output is the shorter one, padded with a token that decodes to text (id 0
    is a real token in most vocabularies): the manager reads verl's response_len, not the padded width."""
    from transformers import AutoTokenizer

    _recipe(tmp_path)
    config = verl_config(tmp_path, tokenizer_dir, 4)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    data = make_batch(tokenizer_dir, refund_groups())
    session = agent_loop_session(data, 0, two_outputs=True)
    bang = tokenizer.convert_tokens_to_ids("!")
    for key in ("responses", "prompts"):  # what verl pads with is 0; here a token that shows if it is read
        session.batch[key][session.batch[key] == 0] = bang
    manager = get_reward_manager_cls("whileai")(config=config, tokenizer=tokenizer, compute_score=None)
    prompt, completion = manager._texts(session[-1:][0])
    width = data.batch["prompts"].shape[-1]
    expected = tokenizer.decode(data.batch["responses"][0][: int(data.batch["attention_mask"][0][width:].sum())])
    assert completion == expected.replace(" [EOS]", "").replace("[EOS]", "") and "!" not in completion
    assert prompt == [{"role": "user", "content": "see the prompt ids"}]
    manager.groups.collector.close()


def test_through_verl_s_agent_loop_with_a_judge_over_http(tmp_path, tokenizer_dir, judge_server) -> None:
    """A dict verifier that returns a key of its own, None and raises; the judge over HTTP grading in the groups
    actor; the same uids sent again; the groups actor killed. Every step's batch is whole, with the declared key
    (None where an answer had none), equation 3 holds on every group, and each loss is counted in the figures.
    verl's agent loop (verl.experimental.agent_loop, in a process of its own: tests/verl/ray_agent_loop.py) calls
    ``_compute_score`` and ``_postprocess`` of its AgentLoopWorker, and DataProto.concat joins the workers' batches
    only when every response carries the same keys."""
    import child_processes

    pytest.importorskip("verl.experimental.agent_loop.agent_loop", reason="verl's agent loop needs .ci/verl's env")
    command = [sys.executable, str(HERE / "ray_agent_loop.py"), str(tmp_path), str(tokenizer_dir), judge_server.url]
    done = child_processes.run(command, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    whileai = ["whileai_reward", "whileai_group", "whileai_member", "whileai_fallback"]
    assert seen["keys"] == ["score", "acc", "pred", *whileai]
    assert seen["pred"] == ["None", "done", "none"]  # None: the answers that were None, or raised
    assert seen["unscorable"] == 3 and seen["graded"] == 4
    assert seen["again"] == ["repeated uid"]
    assert seen["lost"] == ["groups actor failed"]
    assert seen["after"] == [""]  # a new actor graded the rest
    # two steps of two responses the verifier raised on; the second step's 24 responses all repeated uids
    assert seen["earlier"] == {"verifier_failures": 4, "repeated_uid_responses": 24, "groups_actor_lost": 0}
    assert seen["figures"] == {"verifier_failures": 0, "repeated_uid_responses": 0, "groups_actor_lost": 2}
    answers, groups = seen["judge_answers"]
    assert answers == groups and groups[0] == 4 and groups[1] >= 1  # the judge graded on both actors


# ---------------------------------------------------------------- the spread watch


def _watched_recipe(folder: Path, grader: str, **watch: object) -> Path:
    """The scripted recipe, or a Python grader of ``watch_grader.py`` in its place, with ``spread.watch`` set."""
    lines = "".join(f"    {key}: {value}\n" for key, value in watch.items())
    text = SCRIPTED
    if grader != "scripted":
        (folder / "watch_grader.py").write_text(
            "def constant(group):\n    return {'factors': {g['index']: 0.8 for g in group if g['passed']}}\n"
        )
        function = f"{folder / 'watch_grader.py'}:{grader}"
        text = f"grader:\n  kind: python\n  function: {function}\ngrading:\n  mode: advantage\n"
    return _recipe(folder, f"{text}spread:\n  watch:\n{lines}")


def test_the_watch_checks_each_step_s_groups_and_writes_its_checks(tmp_path, tokenizer_dir) -> None:
    """verl hands the manager no step: a step is data.train_batch_size groups (here 2 of the 6), each check reads
    its step's groups, and the checks land in watch.jsonl and whileai_verl.json."""
    _watched_recipe(tmp_path, "scripted", every_steps=1, controls=1, max_extra_calls=1.0)
    config = verl_config(tmp_path, tokenizer_dir, 4, "data.train_batch_size=2")
    data, _ = rewards_through_verl(config, make_batch(tokenizer_dir, refund_groups()))
    assert_equation_3(data, _out(tmp_path))  # the watch changed no reward
    checks = [json.loads(line) for line in (_out(tmp_path) / "watch.jsonl").read_text().splitlines()]
    assert [c["step"] for c in checks] == [1, 2, 3] and sum(c["groups"] for c in checks) == 4  # 4 graded, 2+ passes
    assert not any(c["failed"] for c in checks)
    figures = json.loads((_out(tmp_path) / "whileai_verl.json").read_text())
    assert figures["watch"]["checks"] == 3 and figures["grader_calls"] == 4  # the controls not among them
    from typer.testing import CliRunner

    from whileai.cli.main import app

    shown = CliRunner().invoke(app, ["report", str(_out(tmp_path))])
    assert shown.exit_code == 0 and "3 checks, 0 failed" in shown.stdout


def test_a_watch_set_to_stop_ends_the_run_through_verl_s_reward_loop(tmp_path, tokenizer_dir) -> None:
    """A grader whose scores do not vary: the first check fails, and with on_fail: stop and patience 1 the reward
    worker raises with why, which ends verl's step (verl's last checkpoint is where a resume goes on)."""
    from whileai.errors import WatchStopped

    _watched_recipe(tmp_path, "constant", every_steps=1, on_fail="stop", patience=1)
    config = verl_config(tmp_path, tokenizer_dir, 4, "data.train_batch_size=2")
    with pytest.raises(
        WatchStopped, match=r"the spread watch stopped training \(step 1: spread: no\. the scores' std 0\.000"
    ):
        rewards_through_verl(config, make_batch(tokenizer_dir, refund_groups()))
    (check, *_) = [json.loads(line) for line in (_out(tmp_path) / "watch.jsonl").read_text().splitlines()]
    assert check["stop"] and check["verdict"] == "no"
