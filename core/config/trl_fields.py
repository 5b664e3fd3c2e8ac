"""The fields of TRL's ``GRPOConfig`` and the kind of value each takes, so a recipe's ``trainer`` section is checked
without importing TRL.

Recorded from trl 1.16.0 as ``name -> kind``: ``bool``, ``int``, ``float`` (an int is accepted), ``str``, ``list[str]``,
``list[float]`` or ``any`` (dicts, unions TRL parses itself), with ``?`` when ``None`` is allowed.
``tests/unit/test_recipes.py`` compares this table with the installed TRL, so a rename or a type change in TRL fails
a test instead of silently dropping or mis-checking a recipe setting. Regenerate with
``python -m whileai.config.trl_fields`` after upgrading TRL.
"""

from __future__ import annotations

TRL_VERSION = "1.16.0"

GRPO_CONFIG_KINDS: dict[str, str] = {
    "accelerator_config": "any?",
    "activation_checkpointing": "bool?",
    "activation_checkpointing_kwargs": "any?",
    "adam_beta1": "float",
    "adam_beta2": "float",
    "adam_epsilon": "float",
    "auto_find_batch_size": "bool",
    "average_tokens_across_devices": "bool",
    "batch_eval_metrics": "bool",
    "beta": "float",
    "bf16": "bool?",
    "bf16_full_eval": "bool",
    "cache_implementation": "str?",
    "cast_lm_head_to_fp32": "bool",
    "chat_template_kwargs": "any?",
    "data_seed": "int?",
    "dataloader_drop_last": "bool",
    "dataloader_in_order": "bool",
    "dataloader_multiprocessing_context": "str?",
    "dataloader_num_workers": "int",
    "dataloader_persistent_workers": "bool",
    "dataloader_pin_memory": "bool",
    "dataloader_prefetch_factor": "int?",
    "ddp_backend": "str?",
    "ddp_broadcast_buffers": "bool?",
    "ddp_bucket_cap_mb": "int?",
    "ddp_find_unused_parameters": "bool?",
    "ddp_static_graph": "bool?",
    "ddp_timeout": "int",
    "debug": "any",
    "deepspeed": "any?",
    "delta": "float?",
    "disable_dropout": "bool",
    "disable_tqdm": "bool?",
    "do_eval": "bool",
    "do_predict": "bool",
    "do_train": "bool",
    "ds3_gather_for_generation": "bool",
    "enable_jit_checkpoint": "bool",
    "entropy_coef": "float",
    "entropy_coef_delta": "float",
    "entropy_coef_max": "float",
    "entropy_coef_min": "float",
    "entropy_target": "float",
    "epsilon": "float",
    "epsilon_high": "float?",
    "eval_accumulation_steps": "int?",
    "eval_delay": "float",
    "eval_do_concat_batches": "bool",
    "eval_on_start": "bool",
    "eval_steps": "float?",
    "eval_strategy": "str",
    "eval_use_gather_object": "bool",
    "fp16": "bool",
    "fp16_full_eval": "bool",
    "fsdp": "str?",
    "fsdp_config": "any?",
    "full_determinism": "bool",
    "generation_batch_size": "int?",
    "generation_kwargs": "any?",
    "gradient_accumulation_steps": "int",
    "gradient_checkpointing": "bool",
    "gradient_checkpointing_kwargs": "any?",
    "greater_is_better": "bool?",
    "hub_always_push": "bool",
    "hub_model_id": "str?",
    "hub_private_repo": "bool?",
    "hub_revision": "str?",
    "hub_strategy": "str",
    "hub_token": "str?",
    "ignore_data_skip": "bool",
    "importance_sampling_level": "str",
    "include_for_metrics": "list[str]",
    "include_num_input_tokens_seen": "any",
    "label_names": "list[str]?",
    "label_smoothing_factor": "float",
    "learning_rate": "float",
    "length_column_name": "str",
    "liger_kernel_config": "any?",
    "load_best_model_at_end": "bool",
    "local_rank": "int",
    "log_completions": "bool",
    "log_completions_hub_repo": "str?",
    "log_level": "str",
    "log_level_replica": "str",
    "log_multimodal": "bool",
    "log_on_each_node": "bool",
    "log_unique_prompts": "bool",
    "logging_first_step": "bool",
    "logging_nan_inf_filter": "bool",
    "logging_steps": "float",
    "logging_strategy": "str",
    "loss_type": "str",
    "lr_scheduler_kwargs": "any?",
    "lr_scheduler_type": "str",
    "mask_truncated_completions": "bool",
    "max_completion_length": "int?",
    "max_grad_norm": "float",
    "max_steps": "int",
    "max_tool_calling_iterations": "int?",
    "metric_for_best_model": "str?",
    "min_p": "float?",
    "model_init_kwargs": "any?",
    "multi_objective_aggregation": "str",
    "neftune_noise_alpha": "float?",
    "num_completions_to_print": "int?",
    "num_generations": "int?",
    "num_generations_eval": "int?",
    "num_iterations": "int",
    "num_train_epochs": "float",
    "off_policy_mask_threshold": "float?",
    "optim": "str",
    "optim_args": "str?",
    "optim_target_modules": "any?",
    "output_dir": "str?",
    "pad_to_multiple_of": "any?",
    "parallelism_config": "any?",
    "per_device_eval_batch_size": "int",
    "per_device_train_batch_size": "int",
    "prediction_loss_only": "bool",
    "project": "str",
    "push_to_hub": "bool",
    "ref_model_mixup_alpha": "float",
    "ref_model_sync_steps": "int",
    "remove_unused_columns": "bool?",
    "repetition_penalty": "float",
    "report_to": "any?",
    "restore_callback_states_from_checkpoint": "bool",
    "resume_from_checkpoint": "str?",
    "reward_weights": "list[float]?",
    "router_aux_loss_coef": "float?",
    "run_name": "str?",
    "sapo_temperature_neg": "float",
    "sapo_temperature_pos": "float",
    "save_on_each_node": "bool",
    "save_only_model": "bool",
    "save_steps": "float",
    "save_strategy": "str",
    "save_total_limit": "int?",
    "scale_rewards": "str",
    "seed": "int",
    "shuffle_dataset": "bool?",
    "skip_memory_metrics": "bool",
    "steps_per_generation": "int?",
    "sync_ref_model": "bool",
    "temperature": "float",
    "tf32": "bool?",
    "top_entropy_quantile": "float",
    "top_k": "int",
    "top_p": "float",
    "torch_compile": "bool",
    "torch_compile_backend": "str?",
    "torch_compile_mode": "str?",
    "torch_empty_cache_steps": "int?",
    "trackio_bucket_id": "str?",
    "trackio_space_id": "str?",
    "trackio_static_space_id": "any?",
    "train_sampling_strategy": "str",
    "transformers_continuous_batching_config": "any?",
    "trust_remote_code": "bool",
    "use_adaptive_entropy": "bool",
    "use_bias_correction_kl": "bool",
    "use_cache": "bool",
    "use_cpu": "bool",
    "use_liger_kernel": "bool",
    "use_transformers_continuous_batching": "bool",
    "use_transformers_paged": "bool",
    "use_vllm": "bool",
    "vespo_k_neg": "float",
    "vespo_k_pos": "float",
    "vespo_lambda_neg": "float",
    "vespo_lambda_pos": "float",
    "vllm_enable_sleep_mode": "bool",
    "vllm_gpu_memory_utilization": "float",
    "vllm_group_port": "int",
    "vllm_importance_sampling_cap": "float?",
    "vllm_importance_sampling_clip_max": "float?",
    "vllm_importance_sampling_clip_min": "float?",
    "vllm_importance_sampling_correction": "bool",
    "vllm_importance_sampling_mode": "str",
    "vllm_max_model_length": "int?",
    "vllm_mode": "str",
    "vllm_model_impl": "str",
    "vllm_server_base_url": "str?",
    "vllm_server_host": "str",
    "vllm_server_port": "int",
    "vllm_server_timeout": "float",
    "vllm_structured_outputs_regex": "str?",
    "vllm_tensor_parallel_size": "int",
    "warmup_steps": "float",
    "weight_decay": "float",
}


GRPO_CONFIG_FIELDS: frozenset[str] = frozenset(GRPO_CONFIG_KINDS)


def kind_of(annotation: object) -> str:
    """The kind of a ``GRPOConfig`` field's type annotation (see the module docstring)."""
    import types
    import typing

    args = typing.get_args(annotation)
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    optional = union and type(None) in args
    members = [a for a in args if a is not type(None)] if union else [annotation]
    kinds = set()
    for member in members:
        if member in (bool, int, float, str):
            kinds.add(member.__name__)  # type: ignore[union-attr]
        elif typing.get_origin(member) is list and typing.get_args(member) in ((float,), (str,)):
            kinds.add(f"list[{typing.get_args(member)[0].__name__}]")
        elif isinstance(member, type) and issubclass(member, str):  # str enums: TRL takes their names
            kinds.add("str")
        else:
            kinds.add("any")
    kind = kinds.pop() if len(kinds) == 1 else ("float" if kinds == {"float", "int"} else "any")
    return kind + ("?" if optional else "")


def installed_kinds() -> dict[str, str]:
    """The init fields of the installed TRL's ``GRPOConfig`` and their kinds (imports trl)."""
    import dataclasses
    import typing

    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    return {f.name: kind_of(hints[f.name]) for f in dataclasses.fields(GRPOConfig) if f.init}


if __name__ == "__main__":  # pragma: no cover - a maintenance helper
    for name, kind in sorted(installed_kinds().items()):
        print(f'        "{name}": "{kind}",')
