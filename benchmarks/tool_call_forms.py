"""Benchmark: what share of a real instruct model's tool calls TRL parses, with ``model.tool_calls`` template and json.

The model's first turn on each support scenario (``builtin:actions``, the prompts ``builtin:support`` trains on), as
TRL renders it (the row's system prompt, the customer's request ``reset`` returns, the environment's tools in the
chat template), sampled ``--samples`` times at temperature 1 (TRL's default) with transformers. Each completion is
decoded by TRL's own ``parse_response`` on the tokenizer with TRL's response template (``add_response_schema``),
once as it is and once with ``whileai.integrations.tool_calls.accept_json_tool_calls``. Counted:

- **named a tool**: completions whose text holds ``"name": "<a tool>"`` (an attempted call, in any form);
- **parsed (template)**, **parsed (json)**: completions TRL would run a tool for;
- the forms: ``<tool_call>`` markup, a ```json fence, bare JSON, other text.

    python benchmarks/gguf_from_pypi.py qwen2.5-coder-0.5b --out models/ --hf models/qwen2.5-coder-0.5b-hf
    python benchmarks/tool_call_forms.py --model models/qwen2.5-coder-0.5b-hf --scenarios 8 --samples 4

Writes ``results/tool_call_forms.md`` (a row per model, earlier rows kept) and every completion to ``--json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
TITLE = "# Tool calls TRL parses\n\nWritten by `benchmarks/tool_call_forms.py` (its docstring: what is counted).\n\n"
HEADER = (
    "| model | completions | named a tool | parsed (template) | parsed (json) | <tool_call> | ```json | bare JSON "
    "| other | tokens out (mean) | wall min |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
)


def _form(text: str, named: bool) -> str:
    if "<tool_call>" in text:
        return "<tool_call>"
    if "```" in text and named:
        return "```json"
    return "bare JSON" if named else "other"


def sample(model_path: str, scenarios: int, samples: int, max_new_tokens: int, seed: int) -> list[dict[str, Any]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import add_response_schema, parse_response

    from whileai.integrations.tool_calls import accept_json_tool_calls
    from whileai.simulations.environment import SupportEnvironment, environment_rows, environment_tools
    from whileai.simulations.scenarios import load_scenarios

    template = add_response_schema(AutoTokenizer.from_pretrained(model_path))
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    chosen = load_scenarios("builtin:actions", n=scenarios, seed=seed)
    environment = SupportEnvironment(chosen, seed=seed)
    tools = environment_tools(environment)
    names = [tool.__name__ for tool in tools]
    lenient = accept_json_tool_calls(copy.deepcopy(template), names)
    named_pattern = re.compile(r'"name"\s*:\s*"(' + "|".join(names) + ')"')
    end = template.convert_tokens_to_ids("<|im_end|>")
    torch.manual_seed(seed)
    out = []
    for row in environment_rows(chosen, seed=seed):
        messages = [dict(m) for m in row["prompt"]]
        messages[-1]["content"] = environment.reset(scenario_id=row["scenario_id"])
        prompt = template.apply_chat_template(messages, tools=tools, add_generation_prompt=True, return_dict=True)
        prompt_ids = list(prompt["input_ids"])
        with torch.no_grad():
            generated = model.generate(
                torch.tensor([prompt_ids] * samples), max_new_tokens=max_new_tokens, do_sample=True,
                temperature=1.0, pad_token_id=template.pad_token_id or template.eos_token_id,
            )  # fmt: skip
        for ids in generated[:, len(prompt_ids) :].tolist():
            ids = ids[: ids.index(end) + 1] if end in ids else ids
            text = template.decode(ids, skip_special_tokens=True)
            named = bool(named_pattern.search(text))
            out.append(
                {
                    "scenario_id": row["scenario_id"],
                    "text": text,
                    "tokens": len(ids),
                    "named": named,
                    "form": _form(text, named),
                    "template": bool(parse_response(template, ids, prefix=prompt_ids).get("tool_calls")),
                    "json": bool(parse_response(lenient, ids, prefix=prompt_ids).get("tool_calls")),
                }
            )
    return out


def row(model: str, completions: list[dict[str, Any]], wall_s: float) -> str:
    n = len(completions)

    def share(count: int) -> str:
        return f"{count}/{n} ({count / n:.0%})"

    forms = [sum(c["form"] == f for c in completions) for f in ("<tool_call>", "```json", "bare JSON", "other")]
    cells = [
        model,
        str(n),
        share(sum(c["named"] for c in completions)),
        share(sum(c["template"] for c in completions)),
        share(sum(c["json"] for c in completions)),
        *map(str, forms),
        f"{sum(c['tokens'] for c in completions) / n:.0f}",
        f"{wall_s / 60:.1f}",
    ]
    return "| " + " | ".join(cells) + " |\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a transformers model folder (or a hub id where one can load)")
    parser.add_argument("--scenarios", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4, help="completions per scenario [4]")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "tool_call_forms.md")
    parser.add_argument("--json", type=Path, default=RESULTS / "tool_call_forms.json")
    args = parser.parse_args()
    started = time.perf_counter()
    completions = sample(args.model, args.scenarios, args.samples, args.max_new_tokens, args.seed)
    wall = time.perf_counter() - started
    name = Path(args.model).name
    lines = args.out.read_text().splitlines(keepends=True) if args.out.is_file() else []
    kept = [line for line in lines[len(HEADER.splitlines()) + 4 :] if not line.startswith(f"| {name} |")]
    args.out.write_text(TITLE + HEADER + "".join(kept) + row(name, completions, wall))
    records = json.loads(args.json.read_text()) if args.json.is_file() else {}
    records[name] = completions
    args.json.write_text(json.dumps(records, indent=1) + "\n")
    print(row(name, completions, wall), end="")


if __name__ == "__main__":
    main()
