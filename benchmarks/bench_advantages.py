"""Side-by-side timing of whileai.advantages against its memory floor, verl and OpenRLHF, as markdown tables of ratios.

    pip install --no-deps verl==0.9.1 openrlhf==0.11.2   # the `bench` extra; their heavy dependencies are stubbed below
    python benchmarks/bench_advantages.py [--device cuda] [--threads 1] [--quick] [--no-peers]

What it measures, all in one run on one machine (medians over interleaved rounds; this machine is shared, so read the
ratios):

1. The memory floors, from the bandwidth of a 256 MiB torch copy timed in the same rounds: 17 bytes read and written
   per GAE element (rewards, values and the bool mask in; advantages and returns out), 8 per episode for GRPO and RLOO
   (the reward in, the advantage out).
2. Masked GAE at B=64, T in {1024, 8192, 32768}, alternating 50-token policy spans and 30-token tool spans, gamma
   0.99, lambda 0.95: whileai's ``gae_advantages`` on both of its paths, the numba loop (the CPU default) and the
   torch path (CUDA's, and the CPU's without numba: forced here with ``WHILEAI_NO_NATIVE=1``), each against the
   floor; verl's ``compute_gae_advantage_return`` (verl.trainer.ppo.core_algos) and OpenRLHF's
   ``RemoteExperienceMaker.get_advantages_and_returns``.
3. GRPO (group std) and RLOO outcome advantages for N in {4096, 65536, 262144} episodes in groups of 8 and 16:
   whileai's estimators on ``[N]`` rewards against the floor, on both paths (the numba loop, the CPU default, and
   the torch path, forced with ``WHILEAI_NO_NATIVE=1``), and on verl's inputs (token-level rewards ``[N, 1]``, a
   response mask, ``[N, 1]`` token advantages out) against verl's vectorized paths
   (``compute_grpo_vectorized_outcome_advantage``, ``compute_rloo_vectorized_outcome_advantage``) and, at N=4096
   only, its per-episode loops.
4. From 7.1's hand-built row, whether each implementation carries its state across tool spans.

Targets, printed as ``met`` or ``MISSED`` with their ratios: on the CPU, masked GAE within 3x of its floor at T=32768,
GRPO and RLOO within 4x of theirs at N=262144, G=8; each estimator at least 10x faster than verl's path.

Every table says how each contender ran: device, threads, Python loop or vectorized, whether it whitens.

The peers are imported from their installed packages, never copied. Their package ``__init__`` files (which start Ray,
vLLM, DeepSpeed) are bypassed with an empty package object over the real folder, and the third-party modules their
measured files import at module level but the measured functions never call are stubbed in ``sys.modules``. A peer
that still cannot be imported stops the run (exit 3) with the missing module and the command that installs it;
``--no-peers`` runs whileai alone and says so in every table.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.metadata
import importlib.util
import os
import statistics
import sys
import time
import traceback
import types
from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from whileai.advantages import gae_advantages, group_advantages, outcome_rewards, rloo_advantages
from whileai.advantages.native import native_available

# Exit code of a peer that cannot be imported (the project's "missing optional install").
EXIT_MISSING_PEER = 3

# The peers' versions this script was written against (benchmarks/README.md, the `bench` extra).
PEERS = {"verl": "0.9.1", "openrlhf": "0.11.2"}
INSTALL_PEERS = "pip install --no-deps " + " ".join(f"{name}=={version}" for name, version in PEERS.items())

# Third-party modules imported at module level by verl's core_algos and OpenRLHF's experience_maker (and what they
# import) that the measured functions do not use; stubbed even when installed (they start Ray, load CUDA kernels).
STUBBED = {"omegaconf", "tensordict", "codetiming", "ray", "pylatexenc", "peft", "flash_attn", "deepspeed", "vllm"}
STUBBED |= {"aiohttp", "torchdata"}
# Imported at module level but used only by functions the benchmark never calls; stubbed only when not installed:
# orjson by verl.utils.tracking (the file logger).
STUBBED_IF_MISSING = {"orjson"}

# What to pip install for a module a peer needs at import time (found by importing both peers with every other
# third-party module blocked: transformers and packaging, which the `train` extra brings).
PIP_NAMES = {
    "transformers": "transformers  (or: pip install -e '.[train]')",
    "packaging": "packaging",
    "yaml": "pyyaml",
    "PIL": "pillow",
    "sklearn": "scikit-learn",
}


class PeerUnavailable(Exception):
    """A peer could not be imported; the message names what is missing and the fix."""


class _Anything(types.ModuleType):
    """A stub module: every attribute is a do-nothing class, enough for imports and decorators at import time."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda self, *a, **k: None, "__call__": lambda self, *a, **k: None})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.names:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Anything(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        return None


def _bare_package(name: str) -> None:
    """Register ``name`` as a package over its installed folder without running its ``__init__``."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    package = types.ModuleType(name)
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules[name] = package


def _where(error: BaseException, package: str) -> str:
    """``file:line`` of the innermost frame of ``package`` in the error's traceback (the peer's importing line)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f"{os.sep}{package}{os.sep}" in f.filename]
    if not frames:
        return "its import chain"
    frame = frames[-1]
    return f"{package}{os.sep}{frame.filename.rsplit(os.sep + package + os.sep, 1)[1]}:{frame.lineno}"


def _import_peer(package: str, load: Callable[[], object]) -> object:
    """Import one peer, or raise ``PeerUnavailable`` naming the missing module and the command that fixes it."""
    try:
        _bare_package(package)
        return load()
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if missing == package:
            raise PeerUnavailable(
                f"{package} not importable: {package} is not installed.\n"
                f"  fix: {INSTALL_PEERS}   (the `bench` extra; their own dependencies are not needed)\n"
                f"  or run without the peers: --no-peers"
            ) from error
        version = importlib.metadata.version(package)
        raise PeerUnavailable(
            f"{package} not importable: {package} {version} imports the module {missing!r} "
            f"in {_where(error, package)}, and it is not installed.\n"
            f"  fix: pip install {PIP_NAMES.get(missing, missing)}\n"
            f"  or run without the peers: --no-peers"
        ) from error
    except Exception as error:
        raise PeerUnavailable(
            f"{package} not importable: {type(error).__name__}: {error} (in {_where(error, package)}).\n"
            f"  The stubs of this script ({', '.join(sorted(STUBBED))}) may not fit {package} "
            f"{importlib.metadata.version(package)}; this script was written against {package} {PEERS[package]}.\n"
            f"  fix: {INSTALL_PEERS}, or run without the peers: --no-peers"
        ) from error


def load_peers() -> dict[str, object]:
    """verl's ``core_algos`` module and OpenRLHF's ``RemoteExperienceMaker`` class; ``PeerUnavailable`` if either
    cannot be imported."""
    missing_light = {name for name in STUBBED_IF_MISSING if importlib.util.find_spec(name) is None}
    sys.meta_path.insert(0, _StubFinder(STUBBED | missing_light))

    def verl() -> object:
        from verl.trainer.ppo import core_algos

        return core_algos

    def openrlhf() -> object:
        from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

        return RemoteExperienceMaker

    return {"verl": _import_peer("verl", verl), "openrlhf": _import_peer("openrlhf", openrlhf)}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _once(fn: Callable[[], object], device: torch.device) -> float:
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def interleaved_medians(
    contenders: dict[str, tuple[Callable[[], object], int]], device: torch.device, rounds: int
) -> dict[str, float]:
    """Median seconds per call of each contender, timed in interleaved rounds.

    Each round runs every contender its given number of times, one after the other, so that the load of a shared
    machine falls on all of them alike. One untimed warm-up call each first.
    """
    for fn, _ in contenders.values():
        fn()
    sync(device)
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, (fn, per_round) in contenders.items():
            samples[name] += [_once(fn, device) for _ in range(per_round)]
    return {name: statistics.median(times) for name, times in samples.items()}


class CopyProbe:
    """A 256 MiB tensor copy: its time gives the machine's bandwidth, bytes read plus written per second."""

    def __init__(self, device: torch.device) -> None:
        self.src = torch.empty(64 * 2**20, dtype=torch.float32, device=device).uniform_()
        self.dst = torch.empty_like(self.src)
        self.bytes = 2 * self.src.numel() * self.src.element_size()

    def __call__(self) -> None:
        self.dst.copy_(self.src)


def torch_path(fn: Callable[[], object]) -> object:
    """Run ``fn`` with whileai's numba loops switched off (``WHILEAI_NO_NATIVE=1``): the estimators take their torch
    paths."""
    previous = os.environ.get("WHILEAI_NO_NATIVE")
    os.environ["WHILEAI_NO_NATIVE"] = "1"
    try:
        return fn()
    finally:
        if previous is None:
            del os.environ["WHILEAI_NO_NATIVE"]
        else:
            os.environ["WHILEAI_NO_NATIVE"] = previous


def span_mask(rows: int, length: int, device: torch.device) -> torch.Tensor:
    """Alternating 50 policy tokens and 30 tool tokens, ``[B, T]`` bool."""
    return ((torch.arange(length, device=device) % 80) < 50).expand(rows, length).contiguous()


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}"


# The targets: each whileai estimator on the CPU within this many times its memory floor, and at least this many
# times faster than verl's path.
GAE_FLOOR_LIMIT = 3.0
GROUP_FLOOR_LIMIT = 4.0
VERL_SPEEDUP = 10.0
# Where the floor targets are read: GAE at T=32768 (B=64), GRPO and RLOO at N=262144 episodes in groups of 8.
TARGET_LENGTH = 32768
TARGET_GROUPS = (262144, 8)


def met(ratio: float, limit: float) -> str:
    return "met" if ratio <= limit else "MISSED"


def hand_built_row_check(peers: dict[str, object]) -> list[str]:
    """7.1's row: does each implementation carry its state across the tool spans?

    Two probes: the lambda = 0 advantage of position 1 (0.1 when it bootstraps from V(c5) = 0.6 across the tool
    span; 8.5 when it bootstraps from the 9 at position 2, or -0.5 from a zeroed tool value), and the gamma = 0.9,
    lambda = 1 return at position 1 (0.475 when gamma is applied once per policy token). verl whitens its
    advantages, so its probes read its returns minus the values.
    """
    mask = torch.tensor([[1, 1, 0, 0, 0, 1, 1, 0, 0, 1]], dtype=torch.float32)
    rewards = outcome_rewards(torch.tensor([1.0]), mask, call_costs=0.1)
    values = torch.tensor([[0.5, 0.4, 9, 9, 9, 0.6, 0.7, 9, 9, 0.8]])

    def probes(gae: Callable[[float, float], torch.Tensor]) -> tuple[float, float]:
        lam0 = gae(1.0, 0.0)[0, 1].item()
        ret = gae(0.9, 1.0)[0, 1].item() + values[0, 1].item()
        return lam0, ret

    rows = ["| implementation | lambda=0 advantage at position 1 | gamma=0.9 return at position 1 | carries state |"]
    rows.append("|---|---|---|---|")
    contenders: dict[str, Callable[[float, float], torch.Tensor]] = {
        "whileai": lambda g, lam: gae_advantages(rewards, values, mask, g, lam)[0],
        "whileai, torch path": lambda g, lam: torch_path(lambda: gae_advantages(rewards, values, mask, g, lam)[0]),
    }
    if "verl" in peers:
        core = peers["verl"]
        contenders["verl"] = lambda g, lam: core.compute_gae_advantage_return(rewards, values, mask, g, lam)[1] - values
    if "openrlhf" in peers:
        maker = peers["openrlhf"]
        contenders["openrlhf"] = lambda g, lam: maker.get_advantages_and_returns(None, values, rewards, mask, g, lam)[0]
    for name, gae in contenders.items():
        lam0, ret = probes(gae)
        carries = abs(lam0 - 0.1) < 1e-4 and abs(ret - 0.4751) < 1e-3
        verdict = "yes" if carries else "no: steps through tool positions"
        rows.append(f"| {name} | {lam0:.3f} | {ret:.3f} | {verdict} |")
    rows.append("| chapter (7.1, 7.3) | 0.100 | 0.475 | yes |")
    return rows


def bench_gae(
    peers: dict[str, object], device: torch.device, quick: bool, verdicts: dict[str, float]
) -> tuple[list[str], float]:
    """The GAE table: one row per contender and length, each with its ratio to the floor measured in the same rounds."""
    rows = [f"| T | contender | how it runs | median ms | / floor | target <= {GAE_FLOOR_LIMIT:g}x floor | / whileai |"]
    rows.append("|---|---|---|---|---|---|---|")
    batch, gamma, lam = 64, 0.99, 0.95
    gen = torch.Generator().manual_seed(0)
    probe = CopyProbe(device)
    bandwidths = []
    numba = device.type == "cpu" and native_available()
    descriptions = {
        "whileai, numba kernel": "compiled loop over T per row, one thread (the CPU default), no whitening",
        "whileai, torch path": "vectorized: policy tokens packed, one chunked scan (WHILEAI_NO_NATIVE=1), no whitening",
        "verl": "Python loop over T, 4 tensor ops a step; whitens the advantages",
        "openrlhf": "Python loop over T; no whitening; zeroes the values off the mask",
    }
    for length in (1024, 8192) if quick else (1024, 8192, 32768):
        mask = span_mask(batch, length, device)
        rewards = torch.randn(batch, length, generator=gen).to(device)
        values = torch.randn(batch, length, generator=gen).to(device)
        mask_f = mask.float()  # the peers compute with (1 - mask) and mask * values
        ours = partial(gae_advantages, rewards, values, mask, gamma, lam)
        contenders: dict[str, tuple[Callable[[], object], int]] = {}
        if numba:
            contenders["whileai, numba kernel"] = (ours, 7)
        contenders["whileai, torch path"] = (partial(torch_path, ours), 7)
        contenders["copy"] = (probe, 3)
        if "verl" in peers:
            verl_gae = partial(peers["verl"].compute_gae_advantage_return, rewards, values, mask_f, gamma, lam)
            contenders["verl"] = (verl_gae, 1)
        if "openrlhf" in peers:
            maker = peers["openrlhf"]
            contenders["openrlhf"] = (
                partial(maker.get_advantages_and_returns, None, values, rewards, mask_f, gamma, lam),
                1,
            )
        times = interleaved_medians(contenders, device, rounds=3 if length > 8192 else 5)
        bandwidth = probe.bytes / times.pop("copy")
        bandwidths.append(bandwidth)
        floor = 17 * batch * length / bandwidth
        default = "whileai, numba kernel" if numba else "whileai, torch path"  # what gae_advantages runs here
        reference = times[default]
        rows.append(
            f"| {length} | floor | 17 bytes per element at the copy's bandwidth | {fmt_ms(floor)} | 1.0 | - | - |"
        )
        for name, seconds in times.items():
            ratio = seconds / floor
            ours_row = name.startswith("whileai")
            target = met(ratio, GAE_FLOOR_LIMIT) if name == default and length == TARGET_LENGTH else "-"
            versus = f"{seconds / reference:.2f}" if ours_row else f"{seconds / reference:.0f}x"
            rows.append(
                f"| {length} | {name} | {descriptions[name]} | {fmt_ms(seconds)} | {ratio:.1f} | {target} | {versus} |"
            )
            if ours_row:
                verdicts[f"gae {name} floor T={length}"] = ratio
        if "verl" in times:
            verdicts[f"gae verl T={length}"] = times["verl"] / reference
    return rows, statistics.median(bandwidths)


def _ours_outcome(estimator: Callable, token_rewards: torch.Tensor, response_mask: torch.Tensor, group: int):
    """whileai on verl's inputs and outputs: token rewards [N, 1] in, token advantages [N, 1] out."""
    return estimator(token_rewards.sum(-1), group)[:, None] * response_mask


def bench_groups(
    peers: dict[str, object], device: torch.device, quick: bool, verdicts: dict[str, float], how: str
) -> list[str]:
    """The GRPO and RLOO table: whileai on [N] against the floor, and on verl's [N, 1] inputs against verl."""
    rows = [
        f"| estimator | N | G | whileai [N] ms | floor ms | / floor | target <= {GROUP_FLOOR_LIMIT:g}x floor "
        "| torch path ms | / floor "
        "| whileai [N, 1] ms | verl vectorized ms | verl / whileai | verl loop ms | loop / whileai |"
    ]
    rows.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    core = peers.get("verl")
    gen = torch.Generator().manual_seed(1)
    probe = CopyProbe(device)
    estimators = {
        "GRPO": (group_advantages, "compute_grpo_vectorized_outcome_advantage", "compute_grpo_outcome_advantage"),
        "RLOO": (rloo_advantages, "compute_rloo_vectorized_outcome_advantage", "compute_rloo_outcome_advantage"),
    }
    for episodes in (4096, 65536) if quick else (4096, 65536, 262144):
        for group in (8, 16):
            rewards = (torch.rand(episodes, generator=gen) < 0.3).float().to(device)  # [N]
            token_rewards = rewards[:, None].clone()  # [N, 1]
            response_mask = torch.ones(episodes, 1, device=device)  # [N, 1]
            index = np.repeat(np.arange(episodes // group), group)  # verl's uid per episode, as integers
            for name, (estimator, vectorized, loop) in estimators.items():
                contenders: dict[str, tuple[Callable[[], object], int]] = {
                    "bare": (partial(estimator, rewards, group), 3),
                    "torch path": (partial(torch_path, partial(estimator, rewards, group)), 1),
                    "verl io": (partial(_ours_outcome, estimator, token_rewards, response_mask, group), 3),
                    "copy": (probe, 1),
                }
                if core is not None:
                    contenders["verl"] = (partial(getattr(core, vectorized), token_rewards, response_mask, index), 1)
                times = interleaved_medians(contenders, device, rounds=15)
                floor = 8 * episodes / (probe.bytes / times["copy"])
                ratio = times["bare"] / floor
                verdicts[f"{name} floor N={episodes} G={group}"] = ratio
                cells = [name, str(episodes), str(group), fmt_ms(times["bare"]), fmt_ms(floor), f"{ratio:.1f}"]
                cells += [
                    met(ratio, GROUP_FLOOR_LIMIT) if (episodes, group) == TARGET_GROUPS else "-",
                    fmt_ms(times["torch path"]),
                    f"{times['torch path'] / floor:.1f}",
                ]
                cells += [fmt_ms(times["verl io"])]
                if core is None:
                    rows.append("| " + " | ".join([*cells, "not run", "-", "not run", "-"]) + " |")
                    continue
                cells += [fmt_ms(times["verl"]), f"{times['verl'] / times['verl io']:.1f}x"]
                verdicts[f"{name} N={episodes} G={group}"] = times["verl"] / times["verl io"]
                if episodes <= 4096:  # the per-episode Python loops take seconds beyond this
                    slow = getattr(core, loop)
                    looped = interleaved_medians(
                        {"loop": (lambda f=slow, x=token_rewards, m=response_mask, i=index: f(x.clone(), m, i), 1)},
                        device,
                        rounds=3,
                    )["loop"]
                    cells += [fmt_ms(looped), f"{looped / times['verl io']:.0f}x"]
                else:
                    cells += ["-", "-"]
                rows.append("| " + " | ".join(cells) + " |")
    rows.append("")
    kernel = "the numba loop, one group at a time on one thread" if native_available() else "the torch path (no numba)"
    rows.append(f"- whileai [N]: `group_advantages(rewards, G)` (group std) and `rloo_advantages(rewards, G)`, {how}, ")
    rows[-1] += f"{kernel}, no whitening; the floor is 8 bytes per episode (4 in, 4 out) at the copy's bandwidth."
    rows.append(
        "- torch path: the same with `WHILEAI_NO_NATIVE=1`, vectorized torch ops (what CUDA runs, and the CPU without "
        "numba)."
    )
    rows.append(
        "- whileai [N, 1]: the same on verl's inputs and outputs, `estimator(rewards.sum(-1), G)[:, None] * mask`."
    )
    if core is None:
        rows.append("- verl: not run (--no-peers).")
    else:
        rows.append(
            f"- verl: `{estimators['GRPO'][1]}` and `{estimators['RLOO'][1]}`, {how}, vectorized over group ids "
            "(scatter), GRPO divides by the group std (+1e-6), no batch whitening; the loops (`compute_*_outcome_"
            "advantage`) step through the episodes in Python, N=4096 only."
        )
    return rows


def check_agreement(peers: dict[str, object], device: torch.device) -> list[str]:
    """The numbers being timed agree where the methods agree (no tool spans; verl's std epsilon differs)."""
    notes = []
    gen = torch.Generator().manual_seed(2)
    mask = torch.ones(4, 300, device=device)
    rewards = torch.randn(4, 300, generator=gen).to(device)
    values = torch.randn(4, 300, generator=gen).to(device)
    ours, targets = gae_advantages(rewards, values, mask, 0.99, 0.95)
    torch_adv, _ = torch_path(lambda: gae_advantages(rewards, values, mask, 0.99, 0.95))
    notes.append(f"whileai torch path vs default path: max |diff| {(torch_adv - ours).abs().max():.1e}")
    scores = torch.randn(4096, generator=gen).to(device)
    for name, estimator in (("GRPO", group_advantages), ("RLOO", rloo_advantages)):
        diff = (torch_path(lambda e=estimator: e(scores, 8)) - estimator(scores, 8)).abs().max()
        notes.append(f"whileai {name} torch path vs default path, G=8: max |diff| {diff:.1e}")
    if "verl" in peers:
        _, returns = peers["verl"].compute_gae_advantage_return(rewards, values, mask, 0.99, 0.95)
        notes.append(
            f"verl returns vs whileai value targets, no tool spans: max |diff| {(returns - targets).abs().max():.1e}"
        )
    if "openrlhf" in peers:
        adv, _ = peers["openrlhf"].get_advantages_and_returns(None, values, rewards, mask, 0.99, 0.95)
        notes.append(f"openrlhf advantages vs whileai, no tool spans: max |diff| {(adv - ours).abs().max():.1e}")
    if "verl" in peers:
        r = (torch.rand(64, 1, generator=gen) < 0.5).float().to(device)
        index = np.repeat(np.arange(8), 8)
        theirs, _ = peers["verl"].compute_rloo_vectorized_outcome_advantage(r, torch.ones_like(r), index)
        diff = (theirs[:, 0] - rloo_advantages(r[:, 0], 8)).abs().max()
        notes.append(f"verl RLOO vs whileai: max |diff| {diff:.1e}")
    return notes


def target_lines(verdicts: dict[str, float], peers_run: bool) -> list[str]:
    def verdict(key: str, ok: Callable[[float], bool], text: str) -> str:
        if key not in verdicts:
            return f"{text}: not measured in this run"
        return f"{text}: {verdicts[key]:.1f}x, {'met' if ok(verdicts[key]) else 'MISSED'}"

    def within(limit: float) -> Callable[[float], bool]:
        return lambda ratio: ratio <= limit

    def faster(ratio: float) -> bool:
        return ratio >= VERL_SPEEDUP

    lines = [
        verdict(
            "gae whileai, numba kernel floor T=32768",
            within(GAE_FLOOR_LIMIT),
            f"masked GAE (numba kernel, the CPU default) within {GAE_FLOOR_LIMIT:g}x of the memory floor at T=32768",
        )
    ]
    for name in ("GRPO", "RLOO"):
        text = f"{name} within {GROUP_FLOOR_LIMIT:g}x of the memory floor at N=262144, G=8"
        lines.append(verdict(f"{name} floor N=262144 G=8", within(GROUP_FLOOR_LIMIT), text))
    if not peers_run:
        return [*lines, "verl targets: not measured, the peers were not run (--no-peers)"]
    lines.append(verdict("gae verl T=32768", faster, f"masked GAE >= {VERL_SPEEDUP:g}x faster than verl at T=32768"))
    for name in ("GRPO", "RLOO"):
        for group in (8, 16):
            text = f"{name} >= {VERL_SPEEDUP:g}x faster than verl's vectorized path at N=262144, G={group}"
            lines.append(verdict(f"{name} N=262144 G={group}", faster, text))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--quick", action="store_true", help="skip the largest sizes")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument(
        "--no-peers", action="store_true", help="run whileai alone, without verl and OpenRLHF (the tables say so)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    peers: dict[str, object] = {}
    if not args.no_peers:
        try:
            peers = load_peers()
        except PeerUnavailable as error:
            print(f"bench_advantages: {error}", file=sys.stderr)
            sys.exit(EXIT_MISSING_PEER)
    threads = f"{torch.get_num_threads()} CPU thread{'s' if torch.get_num_threads() > 1 else ''}"
    how = f"{device.type}, {threads}" if device.type == "cpu" else f"{device.type} ({torch.cuda.get_device_name()})"
    print(f"device: {device} ({threads}), torch {torch.__version__}")
    if peers:
        print("peers: " + ", ".join(f"{name} {importlib.metadata.version(name)}" for name in PEERS))
    else:
        print("peers: not run (--no-peers)")
    print("\nCarrying state across tool spans (7.1's hand-built row):\n")
    print("\n".join(hand_built_row_check(peers)))
    verdicts: dict[str, float] = {}
    gae_rows, bandwidth = bench_gae(peers, device, args.quick, verdicts)
    print(
        "\nMasked GAE, B=64, spans of 50 policy / 30 tool tokens, gamma 0.99, lambda 0.95; every contender on "
        f"{how} (median ms):\n"
    )
    print("\n".join(gae_rows))
    if not peers:
        print("\nverl and OpenRLHF: not run (--no-peers).")
    print(
        f"\nfloor: 17 bytes per element over the bandwidth of a 256 MiB copy timed in the same rounds "
        f"(median {bandwidth / 1e9:.1f} GB/s read + write)"
    )
    print(f"\nOutcome advantages in groups of G; every contender on {how} (median ms):\n")
    print("\n".join(bench_groups(peers, device, args.quick, verdicts, how)))
    print("\nTargets:\n")
    print("\n".join(f"- {line}" for line in target_lines(verdicts, bool(peers))))
    print("\nAgreement checks:\n")
    print("\n".join(f"- {note}" for note in check_agreement(peers, device)))


if __name__ == "__main__":
    main()
