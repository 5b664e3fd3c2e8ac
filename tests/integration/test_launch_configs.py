"""Every shipped accelerate launch file, read by accelerate itself and launched wherever the machine allows.

- Each file in ``configs/accelerate/`` is read with accelerate's own config loader and says what the README and its
  opening comment say (the launcher, the number of processes, the precision); a new file fails here until it is
  added to ``EXPECTED``.
- ``cpu_2proc.yaml`` runs for real, with the README's command as written: every process it starts sees its own RANK
  and a WORLD_SIZE of 2, and the whole training run (2 steps, 12 completions a process, groups of 8) records a world
  size of 2, has a group straddling the two slices, and TRL trained on equation 3 group by group, that group too.
- ``multi_gpu.yaml`` and ``deepspeed_zero3.yaml`` need CUDA (and DeepSpeed): marked ``gpu``, they launch the same
  run on the GPUs there are, with ``--num_processes`` set to their count.

accelerate starts a ``MULTI_CPU`` file through mpirun only; without an mpirun hostfile it runs the script once, with
no RANK and a world size of 1 (``accelerate/commands/launch.py``: ``launch_command`` falls through to
``simple_launcher``). ``cpu_2proc.yaml`` therefore names the torchrun launcher (``MULTI_GPU``) with ``use_cpu``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import child_processes
import pytest

pytest.importorskip("accelerate")

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs" / "accelerate"
README = (REPO / "README.md").read_text()
RECIPE = "recipes/tiny_cpu_gar.yaml"
GROUP = 8  # the recipe's num_generations

# What each shipped file must say, as accelerate reads it.
EXPECTED = {
    "cpu_2proc.yaml": {"distributed_type": "MULTI_GPU", "num_processes": 2, "mixed_precision": "no", "use_cpu": True},
    "multi_gpu.yaml": {
        "distributed_type": "MULTI_GPU",
        "num_processes": 8,
        "mixed_precision": "bf16",
        "use_cpu": False,
    },
    "deepspeed_zero3.yaml": {
        "distributed_type": "DEEPSPEED",
        "num_processes": 8,
        "mixed_precision": "bf16",
        "use_cpu": False,
    },
}

# Short runs: 2 steps on 8 prompts; the run folder goes to output_dir.
SMOKE = ["trainer.max_steps=2", "trainer.save_steps=2", "data.num_prompts=8"]


def _load(name: str):
    from accelerate.commands.config.config_args import load_config_from_file

    return load_config_from_file(str(CONFIGS / name))


def _opening_command(name: str) -> str:
    """The command on a launch file's first line (``# accelerate launch ...``)."""
    first = (CONFIGS / name).read_text().splitlines()[0]
    assert first.startswith("# accelerate launch "), first
    return first[2:]


def _readme_cpu_command() -> list[str]:
    """The README's command for two processes on a CPU machine, as one list of words."""
    spans = [" ".join(s.split()) for s in re.findall(r"`(accelerate launch [^`]+)`", README)]
    commands = [s for s in spans if "cpu_2proc.yaml" in s]
    assert len(commands) == 1, commands
    return shlex.split(commands[0])


def _launch(words: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run an ``accelerate launch ...`` command from the repository root with this interpreter's accelerate."""
    assert words[:2] == ["accelerate", "launch"], words
    accelerate = Path(sys.executable).with_name("accelerate")
    executable = str(accelerate) if accelerate.exists() else shutil.which("accelerate")
    assert executable is not None, "the accelerate command is not installed"
    # a test run under a launcher must not hand its own rank to the processes it starts
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    return child_processes.run(
        [executable, *words[1:]], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _per_device_batch(processes: int) -> int:
    """12 completions a process when that splits a group of 8 between two processes, else 8 (one group each)."""
    return 12 if processes > 1 and 12 * processes % GROUP == 0 else GROUP


def _split_groups_a_step(processes: int) -> int:
    """How many groups straddle two processes' slices in one generation batch."""
    per_device = _per_device_batch(processes)
    return sum(rank * per_device % GROUP != 0 for rank in range(1, processes))


def _check_run(run_dir: Path, processes: int, trl_signal) -> list[list[float]]:
    """The run trained on every process and on equation 3; returns the rewards of the groups that straddle."""
    import pandas as pd

    summary = json.loads((run_dir / "whileai_run.json").read_text())
    assert summary["world_size"] == processes
    assert summary["steps"] == 2
    per_device = _per_device_batch(processes)
    batch = per_device * processes
    assert summary["grader"]["groups"] == 2 * batch // GROUP  # every group graded once, on rank 0
    trl_signal.assert_equation_3(run_dir, size=GROUP)
    straddling = []
    for path in sorted((run_dir / "completions").glob("completions_*.parquet")):
        frame = pd.read_parquet(path)
        assert len(frame) == batch  # TRL gathers every process's slice into its log
        for rank in range(1, processes):
            last, first = rank * per_device - 1, rank * per_device  # the two sides of a slice boundary
            if frame["whileai_group"].iloc[last] == frame["whileai_group"].iloc[first]:
                straddling.append(frame[frame["whileai_group"] == frame["whileai_group"].iloc[first]])
    return [rows["whileai_reward"].tolist() for rows in straddling]


# ---------------------------------------------------------------- every file, as accelerate reads it


def test_every_shipped_launch_file_is_checked() -> None:
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_launch_file_says_what_the_readme_says(name: str) -> None:
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.utils import DistributedType

    config = _load(name)
    assert isinstance(config, ClusterConfig)
    said = {key: getattr(config, key) for key in EXPECTED[name]}
    said["distributed_type"] = DistributedType(said["distributed_type"]).value
    said["mixed_precision"] = str(said["mixed_precision"])
    assert said == EXPECTED[name]
    assert config.compute_environment == "LOCAL_MACHINE" and config.num_machines == 1
    # accelerate starts MULTI_CPU through mpirun only: without a hostfile, num_processes is ignored and one runs
    if config.num_processes > 1:
        assert config.distributed_type != DistributedType.MULTI_CPU or config.mpirun_config.get("mpirun_hostfile")
    if config.distributed_type == DistributedType.DEEPSPEED:
        assert config.deepspeed_config["zero_stage"] == 3
    # the file opens with the README's command for it
    command = _opening_command(name)
    assert command.startswith(f"accelerate launch --config_file configs/accelerate/{name} -m whileai.cli.main train ")
    assert f"configs/accelerate/{name}" in README


def test_readme_gives_the_gpu_count_of_multi_gpu_yaml() -> None:
    said = re.search(r"the file says (\d+) GPUs", README)
    assert said is not None and int(said.group(1)) == _load("multi_gpu.yaml").num_processes


def test_readme_cpu_command_is_the_files_own() -> None:
    assert " ".join(_readme_cpu_command()) == _opening_command("cpu_2proc.yaml")


# ---------------------------------------------------------------- cpu_2proc.yaml, launched for real

PROBE = """\
import json, os, sys
from accelerate import PartialState
from whileai.grading.trl import TorchGather

state = PartialState(cpu=True)  # what whileai train's GRPOConfig(use_cpu=True) builds on a machine without CUDA
gather = TorchGather()
seen = {
    "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")},
    "distributed_type": state.distributed_type.value,
    "backend": state.backend,
    "num_processes": state.num_processes,
    "process_index": state.process_index,
    "gathered": gather.all_gather(gather.rank),
}
with open(os.path.join(sys.argv[1], f"rank{state.process_index}.json"), "w") as f:
    json.dump(seen, f)
state.destroy_process_group()  # gloo's threads left running at exit can end a process in std::terminate (SIGABRT)
"""


@pytest.mark.slow
def test_cpu_launch_file_starts_two_ranked_processes(tmp_path: Path) -> None:
    """The README's launcher words with a probe script: each process has its RANK, a WORLD_SIZE of 2, and gloo."""
    pytest.importorskip("torch")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    words = _readme_cpu_command()
    launcher = words[: words.index("-m")]
    result = _launch([*launcher, str(probe), str(tmp_path)], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = sorted((json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")), key=lambda s: s["process_index"])
    assert [s["env"] for s in seen] == [
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
        {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"},
    ]
    for s in seen:
        assert s["distributed_type"] == "MULTI_CPU" and s["backend"] == "gloo" and s["num_processes"] == 2
        assert s["gathered"] == [0, 1]  # TorchGather reaches the other process


@pytest.mark.slow
def test_readme_cpu_command_trains_on_split_groups(tmp_path: Path, trl_signal) -> None:
    """The README's CPU command, as written, plus a short run's overrides: 2 processes x 12 completions = 3 groups of 8
    a step, the middle one split 4 | 4 between the processes; TRL's advantages are equation 3 for each."""
    pytest.importorskip("trl")
    run_dir = tmp_path / "run"
    per_device = _per_device_batch(2)
    overrides = [*SMOKE, f"trainer.per_device_train_batch_size={per_device}", f"output_dir={run_dir}"]
    result = _launch([*_readme_cpu_command(), *overrides], timeout=600)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-3000:])
    # only the process with RANK 0 says this: two lines would mean two processes each thought it was the main one
    assert result.stderr.count("whileai: generating with transformers") == 1, result.stderr[-3000:]
    assert result.stdout.count("whileai: trained") == 1, result.stdout[-3000:]  # the run's end, said once too
    assert "while the other 1 wait for it" in result.stderr  # the gate ran on rank 0, outside the group's timeout
    straddling = _check_run(run_dir, 2, trl_signal)
    assert len(straddling) == 2 * _split_groups_a_step(2) == 2  # one group a step
    # the check above means something only where a split group has a pass and a failure to normalize
    assert any(0 < sum(r > 0 for r in rewards) < GROUP for rewards in straddling), straddling


# ---------------------------------------------------------------- the GPU files, on the GPUs there are


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", ["multi_gpu.yaml", "deepspeed_zero3.yaml"])
def test_gpu_launch_file_trains(name: str, tmp_path: Path, trl_signal) -> None:
    """The file's own command with ``--num_processes`` set to the GPU count: the run records that many processes and
    trains on equation 3 (with 2 or more GPUs, groups straddle the processes' slices)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    if name == "deepspeed_zero3.yaml":
        pytest.importorskip("deepspeed")
    processes = torch.cuda.device_count()
    words = shlex.split(_opening_command(name).replace("RECIPE", RECIPE))
    words[2:2] = ["--num_processes", str(processes)]
    run_dir = tmp_path / "run"
    overrides = [
        *SMOKE,
        f"trainer.per_device_train_batch_size={_per_device_batch(processes)}",
        f"output_dir={run_dir}",
    ]
    result = _launch([*words, *overrides], timeout=900)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-3000:])
    straddling = _check_run(run_dir, processes, trl_signal)
    assert len(straddling) == 2 * _split_groups_a_step(processes)


# ---------------------------------------------------------------- the GPU recipe's vLLM colocate settings, on the CPU


def test_gpu_recipe_vllm_colocate_settings_pass_trls_own_validation() -> None:
    """vLLM colocate cannot run here (no CUDA, no vllm). What can be checked is what TRL checks before vLLM starts:
    the arguments ``whileai train`` passes for the GPU recipe on CUDA with vllm installed (``use_vllm``,
    ``vllm_mode: colocate``: ``whileai.training.plan.grpo_kwargs``) pass ``GRPOConfig``'s own validation, and the
    colocate engine's preconditions in ``trl/generation/vllm_generation.py`` hold for one GPU and for
    ``multi_gpu.yaml``'s count. GRPOConfig accepts ``use_vllm`` without vllm installed (the trainer imports vllm, not
    the config); ``use_cpu`` stands in for a GPU only because transformers refuses ``bf16`` on a machine without
    one."""
    pytest.importorskip("trl")
    from trl import GRPOConfig

    from whileai.config import load_recipe
    from whileai.config.build import train_setup
    from whileai.training.plan import Machine, grpo_kwargs

    setup = train_setup(load_recipe(REPO / "recipes" / "refund_agent_gar.yaml"))
    kwargs = grpo_kwargs(setup, Machine(cuda=True, vllm=True))  # what whileai train passes on such a machine
    assert kwargs["model_init_kwargs"]["dtype"] == setup.model.dtype and "use_cpu" not in kwargs
    kwargs["use_cpu"] = True
    config = GRPOConfig(**kwargs)
    assert (config.use_vllm, config.vllm_mode, config.bf16) == (True, "colocate", True)
    assert config.vllm_gpu_memory_utilization == setup.trainer.model_extra["vllm_gpu_memory_utilization"]
    assert 0 < config.vllm_gpu_memory_utilization < 1
    assert config.scale_rewards == "none" and config.num_generations == 8
    # the colocate engine (VLLMGeneration._init_vllm): tensor parallel groups divide the processes, and its
    # max_num_seqs holds one process's whole generation batch
    for processes in (1, _load("multi_gpu.yaml").num_processes):
        assert processes % config.vllm_tensor_parallel_size == 0
    max_num_seqs = config.per_device_train_batch_size * config.vllm_tensor_parallel_size * config.steps_per_generation
    assert max_num_seqs >= config.generation_batch_size  # one process: the generation batch is all its own
    assert config.generation_batch_size % config.num_generations == 0
    # GRPOConfig does validate these settings: an engine batch that splits a group is refused
    with pytest.raises(ValueError, match="divisible by num_generations"):
        GRPOConfig(**{**kwargs, "num_generations": 7})
    with pytest.raises(ValueError, match="vllm_importance_sampling_clip_min"):
        GRPOConfig(**kwargs, vllm_importance_sampling_clip_min=2.0, vllm_importance_sampling_clip_max=1.0)
