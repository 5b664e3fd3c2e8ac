"""verl's RewardLoopManager on a local Ray with whileai's manager: run by test_reward_manager.py in a process of its
own (``python ray_reward_loop.py TMP TOKENIZER``). Prints one JSON line of what it checked; any failure raises."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(tmp: Path, tokenizer_dir: Path) -> dict:
    import verl  # noqa: F401  # loads the verl.plugins entry points
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls

    registered = get_reward_manager_cls("whileai").__module__  # nothing of whileai imported by hand yet

    from ray_agent_loop import kill_groups_actor, load_helpers  # beside this script, first on sys.path

    helpers = load_helpers()

    import numpy as np
    import ray
    from verl.experimental.reward_loop.reward_loop import RewardLoopManager

    from whileai.integrations.verl import GROUPS_ACTOR

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 1024**2, log_to_driver=False)
    try:
        helpers._recipe(tmp)
        config = helpers.verl_config(tmp, tokenizer_dir, 4, "reward.num_workers=2")
        manager = RewardLoopManager(config)
        out = tmp / "checkpoints" / "whileai"

        # The batch path: one micro-batch per worker, as compute_rm_score sends them.
        data = helpers.make_batch(tokenizer_dir, helpers.refund_groups(), uid="batch")
        scored = manager.compute_rm_score(data)
        data.batch["rm_scores"] = scored.batch["rm_scores"]
        data.non_tensor_batch.update(scored.non_tensor_batch)
        batch_groups = len(helpers.assert_equation_3(data, out))

        # The streaming path: each finished session to a reward worker picked at random, as the agent loop does.
        data = helpers.make_batch(tokenizer_dir, helpers.refund_groups(), seed=1, uid="stream")
        workers = manager.reward_loop_workers
        chooser = random.Random(0)
        sessions = [helpers.agent_loop_session(data, i) for i in range(len(data))]
        outputs = ray.get([chooser.choice(workers).compute_score.remote(s) for s in sessions], timeout=300)
        data.batch["rm_scores"] = manager.reward_manager_cls.assemble_rm_scores(
            data, [o["reward_score"] for o in outputs]
        )
        for key in outputs[0]["reward_extra_info"]:
            data.non_tensor_batch[key] = np.array([o["reward_extra_info"][key] for o in outputs])
        records = helpers.assert_equation_3(data, out)
        graded = sum(1 for line in (out / "grading.jsonl").read_text().splitlines() if json.loads(line)["graded"])
        # The groups actor lost (a node gone): each response gets its verifier reward, and training goes on.
        kill_groups_actor()
        after = ray.get(workers[0].compute_score.remote(sessions[0]), timeout=120)
        return {
            "after_the_actor_is_lost": [
                after["reward_score"] == after["reward_extra_info"]["whileai_reward"],
                after["reward_extra_info"]["whileai_fallback"],
            ],
            "registered_on_import_verl": registered,
            "batch_groups": batch_groups,
            "streamed_groups": len(records),
            "graded": graded,
            "actor": GROUPS_ACTOR,
        }
    finally:
        ray.shutdown()


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]))))
