"""What the GPU device check runs in a fresh interpreter (``device_check.py --worker NAME``, so that a CUDA failure
cannot take the check down), and what its dry run checks of it on a CPU: the Qwen2.5-0.5B-shaped tool caller and its
warm start, the agent recipe's training run, and the estimators' precision against a float64 NumPy reference.
"""

from __future__ import annotations

import importlib
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
AGENT_RECIPE = REPO / "recipes" / "tiny_cpu_agent_gar.yaml"

# Qwen2.5-0.5B's shape. Source: Qwen/Qwen2.5-0.5B-Instruct's config.json (494,032,768 parameters with its 151,936
# vocabulary and tied embeddings; the dry run counts them from this config).
QWEN25_05B: dict[str, Any] = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
QWEN25_05B_VOCAB = 151_936
QWEN25_05B_PARAMETERS = 494_032_768

# The step measured by ``step_time`` (and trained by ``agent_recipe``): G=8, 64 completions a step, 256 tokens each.
STEP_SHAPE = {"num_generations": 8, "per_device_train_batch_size": 64, "max_completion_length": 256}
AGENT_STEPS = 4  # GRPO steps; the first warms up and is left out of the step time
AGENT_DEVICE = "cuda"
AGENT_SHAPE: dict[str, Any] = {}  # overrides of QWEN25_05B (none: the full shape)
# The warm start on the GPU: enough supervised steps for a random model to start calling tools, capped in time.
WARM_START = {"steps": 400, "batch_size": 32, "learning_rate": 3e-4, "rollouts": 32, "max_seconds": 40.0}

# Estimator sizes: on CUDA, the benchmark's largest; dry, small enough for a CPU in a second.
GPU_SIZES = {"gae_rows": 64, "gae_lengths": (8192, 32768), "episodes": 262_144, "groups": (8,), "copy_mib": 1024}
DRY_SIZES = {"gae_rows": 4, "gae_lengths": (1024,), "episodes": 4096, "groups": (8,), "copy_mib": 16}
# Largest error allowed against the float64 reference, relative to the reference's largest magnitude: float32
# results keep float32's precision (measured here: below 1e-6; a TF32 product would be off by about 1e-3 to 1e-2);
# bfloat16 results are computed in float32 and rounded once to bfloat16's 8-bit significand, at most 2**-8 of each
# value (measured here: 0.002 to 0.0034), so twice that is allowed.
TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "bfloat16": 2.0**-7}


def qwen_config(vocab_size: int, **overrides: Any) -> Any:
    """A ``Qwen2Config`` in Qwen2.5-0.5B's shape (``QWEN25_05B``) with the given vocabulary and overrides."""
    from transformers import Qwen2Config

    return Qwen2Config(**{**QWEN25_05B, **overrides}, vocab_size=vocab_size)


def agent_recipe(model_path: str, output_dir: str, steps: int = AGENT_STEPS) -> dict[str, Any]:
    """The recipe ``agent_recipe`` trains: ``recipes/tiny_cpu_agent_gar.yaml`` with the prebuilt model in bf16 and
    ``STEP_SHAPE`` (8 prompts x 8 completions a step)."""
    import yaml

    recipe = yaml.safe_load(AGENT_RECIPE.read_text())
    recipe["model"] = {"name_or_path": model_path, "dtype": "bfloat16"}
    recipe["data"]["num_prompts"] = STEP_SHAPE["per_device_train_batch_size"] // STEP_SHAPE["num_generations"]
    recipe["trainer"].update(
        STEP_SHAPE,
        max_steps=steps,
        bf16=True,
        learning_rate=1e-6,
        save_steps=10 * steps,  # no checkpoint inside the run: the check reads the logs
        logging_steps=1,
    )
    recipe["output_dir"] = output_dir
    return recipe


def numpy_gae(rewards: Any, values: Any, mask: Any, gamma: float, lam: float) -> tuple[Any, Any]:
    """Masked GAE in float64, one reverse step per position (the reference): state is carried across mask-0
    positions, outputs there are 0. ``rewards, values, mask: [B, T]`` -> ``(advantages, value_targets)``."""
    import numpy as np

    r, v, m = (np.asarray(x, dtype=np.float64) for x in (rewards, values, mask))
    rows, length = r.shape
    advantages = np.zeros((rows, length))
    running = np.zeros(rows)  # A of the next policy token
    next_value = np.zeros(rows)  # V of the next policy token
    for t in range(length - 1, -1, -1):
        on = m[:, t] > 0
        fresh = r[:, t] + gamma * next_value - v[:, t] + gamma * lam * running
        advantages[:, t] = np.where(on, fresh, 0.0)
        running = np.where(on, fresh, running)
        next_value = np.where(on, v[:, t], next_value)
    return advantages, np.where(m > 0, advantages + v, 0.0)


def numpy_groups(rewards: Any, group: int, kind: str) -> Any:
    """GRPO ``(r - mean) / (std + 1e-4)`` (sample std) or RLOO ``G/(G-1) (r - mean)`` in float64, ``[N]``."""
    import numpy as np

    grouped = np.asarray(rewards, dtype=np.float64).reshape(-1, group)
    centered = grouped - grouped.mean(1, keepdims=True)
    if kind == "rloo":
        return (centered * group / (group - 1)).reshape(-1)
    std = np.sqrt((centered**2).sum(1, keepdims=True) / (group - 1))
    return (centered / (std + 1e-4)).reshape(-1)


# ---------------------------------------------------------------- workers (run in a fresh interpreter)


def worker_host(arguments: dict[str, Any]) -> dict[str, Any]:
    """Versions after the install, and what CUDA sees; imports everything whileai train needs."""
    from importlib.metadata import version

    import torch

    import whileai

    found = {}
    for name in ("torch", "transformers", "trl", "accelerate", "datasets", "pydantic", "aiohttp", "numpy", "pyarrow"):
        try:
            found[name] = version(name)
        except Exception as error:
            found[name] = f"missing: {error}"
    for module in ("trl", "datasets", "pydantic", "aiohttp", "whileai.training.run", "whileai.advantages"):
        importlib.import_module(module)
    cuda = torch.cuda.is_available()
    return {
        "versions": found,
        "whileai": {"version": whileai.__version__, "file": whileai.__file__},
        "cuda_available": cuda,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if cuda else None,
        "device_count": torch.cuda.device_count() if cuda else 0,
    }


def worker_agent_model(arguments: dict[str, Any]) -> dict[str, Any]:
    """Build the Qwen2.5-0.5B-shaped tool caller: the chat tokenizer trained on the seeded agent's conversations,
    random weights, a warm start on ``arguments["device"]``; saved to ``arguments["folder"]``."""
    return build_agent_model(
        Path(arguments["folder"]),
        arguments.get("shape", {}),
        device=arguments["device"],
        warm=arguments.get("warm", WARM_START),
        seed=arguments.get("seed", 0),
    )


def build_agent_model(folder: Path, shape: dict[str, Any], device: str, warm: dict[str, Any], seed: int = 0) -> dict:
    """The model of ``agent_recipe`` (see ``worker_agent_model``); returns its figures.

    The warm start is the supervised step of ``whileai.training.tiny`` (loss on the model's own turns, the rollout
    tokenized as TRL tokenizes it) run on the device in bf16 autocast, for ``warm["steps"]`` steps or
    ``warm["max_seconds"]``, whichever ends first.
    """
    import random

    import torch
    from transformers import Qwen2ForCausalLM
    from trl.chat_template_utils import qwen2_5_chat_template

    from whileai.config import load_recipe
    from whileai.config.build import train_setup
    from whileai.integrations.tool_calls import environment_tools
    from whileai.tasks.load import load_task
    from whileai.training.tiny import train_chat_tokenizer, trl_rollout_ids, warm_batch

    started = time.monotonic()
    task = load_task(train_setup(load_recipe(AGENT_RECIPE)))
    conversations = task.demonstrations(warm["rollouts"], seed)
    tools = environment_tools(task.environment_factory())
    tokenizer = train_chat_tokenizer(conversations, tools)
    encoded = [trl_rollout_ids(tokenizer, c, tools, qwen2_5_chat_template) for c in conversations]
    config = qwen_config(
        len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **shape,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    built_s = time.monotonic() - started
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=warm["learning_rate"])
    warmup = max(1, warm["steps"] // 10)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    model.train()
    losses: list[float] = []
    warm_started = time.monotonic()
    for _ in range(warm["steps"]):
        if time.monotonic() - warm_started > warm["max_seconds"]:
            break
        chosen = [encoded[rng.randrange(len(encoded))] for _ in range(warm["batch_size"])]
        inputs, attention, labels = warm_batch(chosen, tokenizer.pad_token_id)
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=device != "cpu"):
            loss = model(
                input_ids=inputs.to(device), attention_mask=attention.to(device), labels=labels.to(device)
            ).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    model.eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {
        "shape": {**QWEN25_05B, **shape},
        "vocab_size": len(tokenizer),
        "parameters": sum(p.numel() for p in model.parameters()),
        "conversations": len(conversations),
        "longest_rollout_tokens": max(len(ids) for ids, _ in encoded),
        "warm_start_steps": len(losses),
        "warm_start_first_loss": round(losses[0], 4) if losses else None,
        "warm_start_last_loss": round(losses[-1], 4) if losses else None,
        "build_s": round(built_s, 1),
        "warm_start_s": round(time.monotonic() - warm_started, 1),
        "device": device,
    }


def worker_agent_train(arguments: dict[str, Any]) -> dict[str, Any]:
    """``whileai train RECIPE`` with TRL's reward computation timed (``GRPOTrainer._calculate_rewards``, the call
    that runs whileai's reward function: the grader and the verifier)."""
    import torch
    import trl

    cuda = torch.cuda.is_available()
    calls: list[dict[str, float]] = []
    original = trl.GRPOTrainer._calculate_rewards

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            if cuda:
                torch.cuda.synchronize()
            calls.append({"global_step": self.state.global_step, "seconds": time.perf_counter() - start})

    trl.GRPOTrainer._calculate_rewards = timed
    from whileai.cli.main import main

    sys.argv = ["whileai", "train", arguments["recipe"]]
    code: int | str | None = 0
    started = time.perf_counter()
    try:
        main()
    except SystemExit as stop:
        code = stop.code
    return {"exit_code": code, "reward_calls": calls, "wall_s": round(time.perf_counter() - started, 1)}


def worker_estimators(arguments: dict[str, Any]) -> dict[str, Any]:
    """whileai's estimators against the float64 reference, per dtype and TF32 setting, and the copy bandwidth."""
    return estimator_precision(arguments["device"], arguments.get("sizes", GPU_SIZES), arguments.get("max_s", 60.0))


def set_tf32(on: bool) -> None:
    """TF32 for float32 matrix products on CUDA, through the per-backend switch (torch >= 2.9) or the legacy one."""
    import torch

    matmul = torch.backends.cuda.matmul
    if getattr(matmul, "fp32_precision", None) is not None:
        matmul.fp32_precision = "tf32" if on else "ieee"
    else:
        matmul.allow_tf32 = on


def copy_bandwidth(device: Any, mib: int) -> float:
    """Bytes read plus written per second by a ``mib`` MiB tensor copy (median of 10 after 3 warm-ups)."""
    import torch

    source = torch.empty(mib * 2**20 // 4, dtype=torch.float32, device=device).uniform_()
    target = torch.empty_like(source)
    times = []
    for index in range(13):
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            target.copy_(source)
            end.record()
            torch.cuda.synchronize()
            seconds = begin.elapsed_time(end) / 1e3
        else:
            start = time.perf_counter()
            target.copy_(source)
            seconds = time.perf_counter() - start
        if index >= 3:
            times.append(seconds)
    return 2 * source.numel() * 4 / statistics.median(times)


def estimator_precision(device_name: str, sizes: dict[str, Any], max_s: float) -> dict[str, Any]:
    """Each case: whileai's output on ``device`` from inputs rounded to the dtype, against the float64 reference of
    those same rounded inputs; ``err`` is the largest difference over the reference's largest magnitude."""
    import numpy as np
    import torch

    from whileai.advantages import gae_advantages, group_advantages, rloo_advantages
    from whileai.advantages.scan import float32_matmul_is_exact

    device = torch.device(device_name)
    started = time.monotonic()
    cuda = device.type == "cuda"
    generator = torch.Generator().manual_seed(0)
    result: dict[str, Any] = {"device": str(device), "cases": [], "tolerance": TOLERANCE}

    def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
        out = fn()
        times = []
        for _ in range(3):
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = fn()
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return out, statistics.median(times)

    def record(case: dict[str, Any], outputs: list[Any], references: list[Any], seconds: float) -> None:
        err = 0.0
        for out, ref in zip(outputs, references, strict=True):
            got = out.detach().double().cpu().numpy()
            scale = max(1.0, float(np.abs(ref).max()))
            err = max(err, float(np.abs(got - ref).max()) / scale)
        case.update(err=err, ok=err <= TOLERANCE[case["dtype"]], ms=round(seconds * 1e3, 3))
        result["cases"].append(case)

    tf32_settings = (False, True) if cuda else (False,)
    dtypes = (torch.float64, torch.float32, torch.bfloat16)
    # GAE on [B, T] with alternating 50 policy / 30 tool tokens, at two discounts
    for length in sizes["gae_lengths"]:
        rows = sizes["gae_rows"]
        mask = ((torch.arange(length) % 80) < 50).expand(rows, length).contiguous()  # [B, T]
        base_r = torch.randn(rows, length, generator=generator, dtype=torch.float64)  # [B, T]
        base_v = torch.randn(rows, length, generator=generator, dtype=torch.float64)  # [B, T]
        for gamma, lam in ((1.0, 1.0), (0.99, 0.95)):
            for dtype in dtypes:
                r, v = base_r.to(dtype), base_v.to(dtype)  # the rounded inputs both sides see
                reference = numpy_gae(r.double().numpy(), v.double().numpy(), mask.numpy(), gamma, lam)
                for tf32 in tf32_settings if dtype != torch.float64 else (False,):
                    if time.monotonic() - started > max_s:
                        result["stopped"] = f"time limit {max_s} s reached"
                        return result
                    if cuda:
                        set_tf32(tf32)
                    rd, vd, md = r.to(device), v.to(device), mask.to(device)
                    (adv, target), seconds = timed(partial(gae_advantages, rd, vd, md, gamma, lam))
                    case = {"estimator": "gae", "shape": [rows, length], "gamma": gamma, "lam": lam}
                    case.update(dtype=str(dtype).removeprefix("torch."), tf32=tf32, out_dtype=str(adv.dtype)[6:])
                    case["float32_matmul_exact"] = float32_matmul_is_exact(device)
                    record(case, [adv, target], list(reference), seconds)
    # GRPO and RLOO on [N] continuous rewards
    for group in sizes["groups"]:
        base = torch.randn(sizes["episodes"], generator=generator, dtype=torch.float64)  # [N]
        for name, estimator in (("grpo", group_advantages), ("rloo", rloo_advantages)):
            for dtype in dtypes:
                rewards = base.to(dtype)
                reference = numpy_groups(rewards.double().numpy(), group, name)
                for tf32 in tf32_settings if dtype != torch.float64 else (False,):
                    if cuda:
                        set_tf32(tf32)
                    on_device = rewards.to(device)
                    out, seconds = timed(partial(estimator, on_device, group))
                    case = {"estimator": name, "shape": [sizes["episodes"]], "group": group}
                    case.update(dtype=str(dtype).removeprefix("torch."), tf32=tf32, out_dtype=str(out.dtype)[6:])
                    record(case, [out], [reference], seconds)
    if cuda:
        # The switch works: a float32 product with TF32 on is far off float64, with it off it is not.
        a = torch.randn(2048, 2048, device=device)
        b = torch.randn(2048, 2048, device=device)
        exact = (a.double() @ b.double()).abs().max().item()
        errors = {}
        for tf32 in (False, True):
            set_tf32(tf32)
            errors[tf32] = ((a @ b).double() - a.double() @ b.double()).abs().max().item() / exact
        set_tf32(False)
        result["tf32_control"] = {"matmul_err_tf32_off": errors[False], "matmul_err_tf32_on": errors[True]}
        result["tf32_control"]["switch_effective"] = errors[True] > 10 * errors[False]
    result["copy_bandwidth_gbs"] = round(copy_bandwidth(device, sizes["copy_mib"]) / 1e9, 1)
    result["all_ok"] = all(case["ok"] for case in result["cases"])
    return result


WORKERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "host": worker_host,
    "agent_model": worker_agent_model,
    "agent_train": worker_agent_train,
    "estimators": worker_estimators,
}


# ---------------------------------------------------------------- the dry run's checks of the above, on a CPU


def dry_model_config() -> dict[str, Any]:
    """The full Qwen2.5-0.5B shape counted on the meta device (no memory), and one layer of it run on the CPU."""
    import torch
    from transformers import Qwen2ForCausalLM

    with torch.device("meta"):
        full = Qwen2ForCausalLM(qwen_config(QWEN25_05B_VOCAB))
    count = sum(p.numel() for p in full.parameters())
    if count != QWEN25_05B_PARAMETERS:
        raise AssertionError(f"the config has {count} parameters, Qwen2.5-0.5B has {QWEN25_05B_PARAMETERS}")
    torch.manual_seed(0)
    one = Qwen2ForCausalLM(qwen_config(2048, num_hidden_layers=1))
    with torch.no_grad():
        logits = one(input_ids=torch.arange(8)[None]).logits  # [1, 8, V]
    if tuple(logits.shape) != (1, 8, 2048) or not torch.isfinite(logits).all():
        raise AssertionError(f"one layer gave logits of shape {tuple(logits.shape)}")
    return {"parameters": count, "one_layer_parameters": sum(p.numel() for p in one.parameters())}


def dry_agent_model(work: Path) -> dict[str, Any]:
    """The GPU part's model builder on the CPU with a narrow shape and two warm-start steps; TRL loads it back."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = work / "dry_agent_model"
    narrow = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2}
    warm = {**WARM_START, "steps": 2, "batch_size": 2, "rollouts": 2, "max_seconds": 60.0}
    figures = build_agent_model(folder, {**narrow, "num_key_value_heads": 1}, device="cpu", warm=warm)
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if model.config.model_type != "qwen2" or tokenizer.chat_template is None or figures["warm_start_steps"] != 2:
        raise AssertionError(f"built {model.config.model_type}, template {tokenizer.chat_template is not None}")
    return {k: figures[k] for k in ("vocab_size", "parameters", "warm_start_steps", "warm_start_last_loss")}


def dry_agent_recipe(work: Path) -> dict[str, Any]:
    """The recipe the GPU run trains validates, with the step shape the step time is quoted at."""
    import yaml

    from whileai.config import load_recipe

    recipe = agent_recipe(str(work / "dry_agent_model"), str(work / "dry_run"))
    path = work / "dry_agent_recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    trainer = load_recipe(path).recipe.trainer
    got = {k: getattr(trainer, k, None) or (trainer.model_extra or {}).get(k) for k in STEP_SHAPE}
    if got != STEP_SHAPE:
        raise AssertionError(f"trainer {got} is not {STEP_SHAPE}")
    return {"trainer": recipe["trainer"], "model": recipe["model"]}


def dry_estimators() -> dict[str, Any]:
    """The precision comparison on the CPU at small sizes: the reference and the bookkeeping work."""
    result = estimator_precision("cpu", DRY_SIZES, 60.0)
    if not result["all_ok"]:
        raise AssertionError([c for c in result["cases"] if not c["ok"]][:3])
    return {"cases": len(result["cases"]), "largest_err": max(c["err"] for c in result["cases"])}
