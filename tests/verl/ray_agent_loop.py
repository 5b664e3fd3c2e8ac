"""verl's agent loop on a local Ray with whileai's manager: run by test_reward_manager.py in a process of its own
(``python ray_agent_loop.py TMP TOKENIZER JUDGE_URL``). Prints one JSON line of what it saw; any failure raises.

Each finished session goes through verl's own ``AgentLoopWorker._compute_score`` (to a reward worker of verl's
``RewardLoopManager`` picked at random, a Ray actor) and each agent worker's chunk through its ``_postprocess``
(the reward columns named by the chunk's first response), then verl's ``DataProto.concat`` joins the chunks as the
trainer does. Only the agent worker's rollout state is left out (no server, no model): the stub has the three
attributes those two methods read.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def load_helpers() -> Any:
    spec = importlib.util.spec_from_file_location("verl_test_helpers", HERE / "test_reward_manager.py")
    assert spec is not None and spec.loader is not None
    helpers = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = helpers
    spec.loader.exec_module(helpers)
    return helpers


def kill_groups_actor() -> None:
    """Kill the run's groups actor and wait until Ray has let its name go (``ray.kill`` returns before the actor is
    dead: a call sent at once could still reach it)."""
    import time

    import ray

    from whileai.integrations.verl import GROUPS_ACTOR

    ray.kill(ray.get_actor(GROUPS_ACTOR), no_restart=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            ray.get_actor(GROUPS_ACTOR)
        except ValueError:  # no actor of that name: it is dead
            return
        time.sleep(0.05)
    raise TimeoutError("the groups actor outlived ray.kill by 120 s")


def agent_worker(handles: list[Any]) -> Any:
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    worker = object.__new__(AgentLoopWorker)  # verl's methods, without a rollout server behind them
    worker.reward_loop_worker_handles = handles
    worker.processor = None
    worker.mm_processor_kwargs = None
    return worker


async def through_agent_loop(worker: Any, data: Any, chunks: int) -> Any:
    """``data``'s rows as finished sessions, scored and batched by verl's agent-loop code, in ``chunks`` agent
    workers' batches joined by ``DataProto.concat``."""
    import torch
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopMetrics,
        AgentLoopOutput,
        AgentLoopWorker,
        _InternalAgentLoopOutput,
    )
    from verl.protocol import DataProto

    width, height = data.batch["prompts"].shape[-1], data.batch["responses"].shape[-1]
    outputs, sessions = [], []
    for row in range(len(data)):
        mask = data.batch["attention_mask"][row]
        prompt = data.batch["prompts"][row][width - int(mask[:width].sum()) :].tolist()
        response = data.batch["responses"][row][: int(mask[width:].sum())].tolist()
        output = AgentLoopOutput(
            prompt_ids=prompt, response_ids=response, response_mask=[1] * len(response), metrics=AgentLoopMetrics()
        )
        kwargs = {key: values[row] for key, values in data.non_tensor_batch.items()}
        kwargs["raw_prompt"] = [{"role": "user", "content": f"task-{kwargs['extra_info']['index']}: refund ORD-17"}]
        outputs.append(output)
        sessions.append(AgentLoopWorker._compute_score(worker, [output], kwargs))
    await asyncio.gather(*sessions)

    def padded(output: AgentLoopOutput) -> _InternalAgentLoopOutput:
        p, r = output.prompt_ids, output.response_ids
        prompt = torch.tensor([[0] * (width - len(p)) + p])
        response = torch.tensor([r + [0] * (height - len(r))])
        attention = torch.tensor([[0] * (width - len(p)) + [1] * (len(p) + len(r)) + [0] * (height - len(r))])
        return _InternalAgentLoopOutput(
            prompt_ids=prompt,
            response_ids=response,
            input_ids=torch.cat([prompt, response], 1),
            position_ids=torch.clamp(torch.cumsum(attention, 1) - 1, min=0),
            response_mask=torch.tensor([[1] * len(r) + [0] * (height - len(r))]),
            attention_mask=attention,
            reward_score=output.reward_score,
            num_turns=2,
            metrics=output.metrics,
            extra_fields=output.extra_fields,
        )

    inputs = [padded(o) for o in outputs]
    size = -(-len(inputs) // chunks)
    parts = [AgentLoopWorker._postprocess(worker, inputs[i : i + size]) for i in range(0, len(inputs), size)]
    return DataProto.concat(parts)


def main(tmp: Path, tokenizer_dir: Path, judge_url: str) -> dict:
    import verl  # noqa: F401  # loads the verl.plugins entry points

    helpers = load_helpers()
    import ray
    from verl.experimental.reward_loop.reward_loop import RewardLoopManager

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 1024**2, log_to_driver=False)
    try:
        helpers._judge_recipe(tmp, judge_url, concurrency=8, timeout_s=10)
        verifier = helpers._verifier(tmp, "pred")
        keys = "+reward.reward_kwargs.verifier_keys=[pred]"
        config = helpers.verl_config(tmp, tokenizer_dir, 4, "reward.num_workers=2", keys, verifier=verifier)
        manager = RewardLoopManager(config)
        worker = agent_worker(manager.reward_loop_worker_handles)
        out = tmp / "checkpoints" / "whileai"
        seen: dict[str, Any] = {}

        # A step: answers with extra keys, None and an exception among them, in two agent workers' batches.
        data = helpers.make_batch(tokenizer_dir, helpers.misbehaving_groups(), uid="step-1")
        batch = asyncio.run(asyncio.wait_for(through_agent_loop(worker, data, chunks=2), timeout=300))
        data.batch["rm_scores"] = batch.batch["rm_scores"]
        data.non_tensor_batch.update({k: v for k, v in batch.non_tensor_batch.items() if k.startswith("whileai")})
        records = helpers.assert_equation_3(data, out)
        seen["keys"] = batch.meta_info["reward_extra_keys"]
        seen["pred"] = sorted({str(p) for p in batch.non_tensor_batch["pred"]})
        seen["unscorable"] = sum(g["unscorable"] for g in records.values())
        seen["graded"] = sum(1 for g in records.values() if g["graded"] and not g["reason"])

        # The same uids in a later step (verl v0's validation with a dataset's uid column): counted and named.
        again = asyncio.run(asyncio.wait_for(through_agent_loop(worker, data, chunks=2), timeout=300))
        seen["again"] = sorted(set(again.non_tensor_batch["whileai_fallback"]))

        # The groups actor killed: a response that finds it gone keeps its verifier reward (each reward worker
        # finds out on its own), a new actor grades the groups after it, and the loss is counted in the figures.
        kill_groups_actor()
        probe = helpers.make_batch(tokenizer_dir, [("task-0 refund order ORD-17", [helpers.SHORT])], uid="probe")
        session = helpers.agent_loop_session(probe, 0)
        lost = ray.get([w.compute_score.remote(session) for w in manager.reward_loop_workers], timeout=300)
        seen["lost"] = sorted({o["reward_extra_info"]["whileai_fallback"] for o in lost})
        later = helpers.make_batch(tokenizer_dir, helpers.refund_groups(), uid="step-2")
        rest = asyncio.run(asyncio.wait_for(through_agent_loop(worker, later, chunks=2), timeout=300))
        seen["after"] = sorted(set(rest.non_tensor_batch["whileai_fallback"]))
        figures = json.loads((out / "whileai_verl.json").read_text())
        counts = ("verifier_failures", "repeated_uid_responses", "groups_actor_lost")
        seen["figures"] = {key: figures[key] for key in counts}
        seen["earlier"] = {key: figures["earlier"][key] for key in counts}  # the lost actor's, kept
        # what each actor's judge answered, asked or from its cache, against the groups each sent it
        asked = [f["judge"]["calls"] + f["judge"]["cache_hits"] for f in (figures["earlier"], figures)]
        seen["judge_answers"] = [asked, [figures["earlier"]["grader_calls"], figures["grader_calls"]]]
        return seen
    finally:
        ray.shutdown()


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])))
