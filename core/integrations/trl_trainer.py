"""``WhileaiGRPOTrainer``: TRL's ``GRPOTrainer`` with the hooks ``whileai train`` needs, and nothing else.

Each hook overrides a method that TRL or transformers keep private, so each is named here with why, and
``tests/integration/test_trl_hooks.py`` fails if the pinned TRL (``trl>=1.16,<2``) or transformers renames or
changes what it relies on:

- ``log``: TRL's ``GRPOTrainer.log`` writes ``self._logs["completion"]`` to Parquet with pandas, which infers one
  struct type for the arguments of all the batch's tool calls; a batch whose calls all take no arguments gives a
  struct with no fields, which Parquet cannot store, and the run stops. The hook makes every tool call's arguments
  the JSON string of the OpenAI form first (``json_tool_arguments``).
- ``_issue_warnings_after_load``: transformers' ``Trainer`` calls it after loading a checkpoint's weights. A
  checkpoint does not store a weight tied to another (a tiny model's ``lm_head.weight``), and transformers warns of
  it as a missing key. The hook ties the weights again and says so once, in whileai's words; any other missing key
  keeps transformers' warning.
- ``create_model_card`` (public): TRL names the base model only when it is a hub id, so a run from a local folder
  got a card saying "a fine-tuned version of [None]" and a quick start loading "None"; the card names the folder
  and the run's ``final/`` instead.

Importing this module imports trl (and so torch and transformers): ``whileai.integrations.trl.grpo_trainer`` imports
it when called, and nothing else does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trl import GRPOTrainer

__all__ = ["WhileaiGRPOTrainer", "json_tool_arguments"]


class WhileaiGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose completion logs stay writable to Parquet and whose resumed tied weights are said once.

    Args:
        say: where the one line about tied weights goes (None: nowhere); every other argument is ``GRPOTrainer``'s.
    """

    def __init__(self, *args: Any, say: Callable[[str], None] | None = None, **kwargs: Any) -> None:
        self._say = say
        super().__init__(*args, **kwargs)

    def log(self, *arguments: Any, **keywords: Any) -> Any:
        # TRL's private completion buffer, read just before TRL writes it (see the module docstring).
        logs = getattr(self, "_logs", None)
        if self.log_completions and isinstance(logs, dict) and "completion" in logs:
            json_tool_arguments(logs["completion"])
        return super().log(*arguments, **keywords)

    def create_model_card(self, *arguments: Any, **keywords: Any) -> None:
        # TRL names a base model only when it is a hub id; for a local folder (every model whileai builds or
        # converts) its card reads "a fine-tuned version of [None](https://huggingface.co/None)".
        super().create_model_card(*arguments, **keywords)
        card = Path(self.args.output_dir) / "README.md"
        if not self.is_world_process_zero() or not card.is_file():
            return
        text = card.read_text(encoding="utf-8")
        base = str(getattr(self.model.config, "_name_or_path", "") or "")
        named = f"the model in `{base}`" if base else "a model built from a config (random weights)"
        text = text.replace(
            "a fine-tuned version of [None](https://huggingface.co/None)", f"a fine-tuned version of {named}"
        )
        text = text.replace('model="None"', f'model="{Path(self.args.output_dir) / "final"}"')
        card.write_text(text, encoding="utf-8")

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        # transformers' private warning of missing and unexpected keys after a checkpoint's weights are loaded.
        missing = set(getattr(load_result, "missing_keys", None) or ())
        tied = getattr(self.model, "all_tied_weights_keys", None) or {}
        if not missing or not missing <= set(tied) or getattr(load_result, "unexpected_keys", None):
            return super()._issue_warnings_after_load(load_result)
        self.model.tie_weights()
        if self._say is not None:
            names = ", ".join(f"{key} (tied to {tied[key]})" for key in sorted(missing))
            self._say(f"whileai: the checkpoint does not store {names}: tied again on loading, as saved")
        return None


def json_tool_arguments(completions: Any) -> None:
    """Turn every dict ``arguments`` of the tool calls in logged conversations into its JSON string, in place.

    TRL writes its completion logs with pandas to Parquet, which infers one struct type for the arguments of all the
    batch's tool calls: a batch whose calls all take no arguments (``list_orders()``) gives a struct with no fields,
    which Parquet cannot store, and the run stops. As JSON strings (the OpenAI form) every batch has one column type,
    no struct merges the fields of different tools, and ``whileai.rows.text.render_messages`` renders them as it
    renders the dicts.
    """
    for messages in completions:
        if not isinstance(messages, list):
            continue
        for message in messages:
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            for call in calls or ():
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("arguments"), dict):
                    function["arguments"] = json.dumps(function["arguments"])
