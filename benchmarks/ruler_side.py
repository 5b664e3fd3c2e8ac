"""RULER's side of ``judge_vs_ruler.py``, run under a python that has ``openpipe-art`` (not whileai's environment).

    python ruler_side.py JOB.json OUT.jsonl

JOB.json holds ``model`` (a LiteLLM name, ``openai/<id>``), ``base_url``, ``max_tokens`` and ``groups`` (one list of
OpenAI message lists per group). Each group goes to ``art.rewards.ruler.ruler`` with its default rubric, one at a
time, at temperature 0; OUT.jsonl gets one line per group, in order: ``{"scores": [...]}`` (RULER's trajectory id,
explanation and score) or ``{"error": "..."}`` where RULER raised (an answer it could not parse, too few scores).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of a price list


async def main(job_path: str, out_path: str) -> int:
    from art.rewards.ruler import ruler  # imported here: it takes seconds, and the usage line needs none of it

    job = json.loads(open(job_path).read())
    params = {"api_base": job["base_url"], "api_key": "none", "temperature": 0.0, "max_tokens": job["max_tokens"]}
    with open(out_path, "w") as out:
        for n, message_lists in enumerate(job["groups"], 1):
            try:
                scores = await ruler(message_lists, judge_model=job["model"], extra_litellm_params=params)
                line = {"scores": [s.model_dump() for s in scores]}
            except Exception as exc:  # RULER's own failure is the measurement: one group unusable
                line = {"error": f"{type(exc).__name__}: {exc}"[:1000]}
            out.write(json.dumps(line) + "\n")
            out.flush()
            print(f"ruler_side: group {n}/{len(job['groups'])}: {line.get('error') or 'scored'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
