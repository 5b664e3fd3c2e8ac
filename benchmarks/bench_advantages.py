"""Side-by-side timing of whileai.advantages against verl and OpenRLHF, printed as markdown tables of ratios.

    pip install --no-deps verl openrlhf     # the `bench` extra; their heavy dependencies are stubbed below
    python benchmarks/bench_advantages.py [--device cuda] [--quick]

What it measures, all in one run on one machine (medians over repeats; this machine is shared, so read the ratios):

1. The memory floor: 17 bytes read and written per GAE element (rewards, values and the bool mask in; advantages
   and returns out) over the bandwidth of a large torch copy measured here.
2. Masked GAE at B=64, T in {1024, 8192, 32768}, alternating 50-token policy spans and 30-token tool spans, gamma
   0.99, lambda 0.95: whileai's ``gae_advantages`` against verl's ``compute_gae_advantage_return``
   (verl.trainer.ppo.core_algos) and OpenRLHF's ``RemoteExperienceMaker.get_advantages_and_returns``.
3. GRPO (group std) and RLOO outcome advantages for N in {4096, 65536, 262144} episodes in groups of 8 and 16,
   against verl's vectorized paths (``compute_grpo_vectorized_outcome_advantage``,
   ``compute_rloo_vectorized_outcome_advantage``) and, at N=4096 only, its per-episode loops. Every contender gets
   verl's inputs (token-level rewards ``[N, 1]``, a response mask) and produces ``[N, 1]`` token advantages.
4. From 7.1's hand-built row, whether each peer carries its state across tool spans.

verl and OpenRLHF are imported from their installed packages, never copied. Their package ``__init__`` files (which
start Ray, vLLM, DeepSpeed) are bypassed with an empty package object over the real folder, and the third-party
modules their measured files import but the measured functions never call are stubbed in ``sys.modules``.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import statistics
import sys
import time
import types
from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from whileai.advantages import gae_advantages, group_advantages, outcome_rewards, rloo_advantages

# Third-party modules imported at module level by verl's core_algos and OpenRLHF's experience_maker (and what they
# import) that the measured functions do not use.
STUBBED = {"omegaconf", "tensordict", "codetiming", "ray", "pylatexenc", "peft", "flash_attn", "deepspeed", "vllm"}
STUBBED |= {"aiohttp", "torchdata"}


class _Anything(types.ModuleType):
    """A stub module: every attribute is a do-nothing class, enough for imports and decorators at import time."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda self, *a, **k: None, "__call__": lambda self, *a, **k: None})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STUBBED:
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
        raise ModuleNotFoundError(name)
    package = types.ModuleType(name)
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules[name] = package


def load_peers() -> dict[str, object]:
    """Import the peers' functions; a peer that cannot be imported is reported with the reason."""
    sys.meta_path.insert(0, _StubFinder())
    peers: dict[str, object] = {}
    try:
        _bare_package("verl")
        from verl.trainer.ppo import core_algos

        peers["verl"] = core_algos
    except Exception as error:  # report, do not hide: the table says why a column is missing
        peers["verl"] = f"verl not importable: {type(error).__name__}: {error}"
    try:
        _bare_package("openrlhf")
        from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

        peers["openrlhf"] = RemoteExperienceMaker
    except Exception as error:
        peers["openrlhf"] = f"openrlhf not importable: {type(error).__name__}: {error}"
    return peers


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


def span_mask(rows: int, length: int, device: torch.device) -> torch.Tensor:
    """Alternating 50 policy tokens and 30 tool tokens, ``[B, T]`` bool."""
    return ((torch.arange(length, device=device) % 80) < 50).expand(rows, length).contiguous()


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}"


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

    def probes(gae: Callable[[float, float], tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, float]:
        lam0 = gae(1.0, 0.0)[0, 1].item()
        ret = gae(0.9, 1.0)[0, 1].item() + values[0, 1].item()
        return lam0, ret

    rows = ["| implementation | lambda=0 advantage at position 1 | gamma=0.9 return at position 1 | carries state |"]
    rows.append("|---|---|---|---|")
    contenders = {"whileai": lambda g, lam: gae_advantages(rewards, values, mask, g, lam)[0]}
    if not isinstance(peers["verl"], str):
        core = peers["verl"]
        contenders["verl"] = lambda g, lam: core.compute_gae_advantage_return(rewards, values, mask, g, lam)[1] - values
    if not isinstance(peers["openrlhf"], str):
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
    rows = [
        "| T | whileai ms | floor ms | whileai / floor | verl ms | verl / whileai | openrlhf ms | openrlhf / whileai |"
    ]
    rows.append("|---|---|---|---|---|---|---|---|")
    batch, gamma, lam = 64, 0.99, 0.95
    gen = torch.Generator().manual_seed(0)
    probe = CopyProbe(device)
    bandwidths = []
    for length in (1024, 8192) if quick else (1024, 8192, 32768):
        mask = span_mask(batch, length, device)
        rewards = torch.randn(batch, length, generator=gen).to(device)
        values = torch.randn(batch, length, generator=gen).to(device)
        mask_f = mask.float()  # the peers compute with (1 - mask) and mask * values
        contenders = {
            "whileai": (partial(gae_advantages, rewards, values, mask, gamma, lam), 7),
            "copy": (probe, 3),
        }
        if not isinstance(peers["verl"], str):
            verl_gae = partial(peers["verl"].compute_gae_advantage_return, rewards, values, mask_f, gamma, lam)
            contenders["verl"] = (verl_gae, 1)
        if not isinstance(peers["openrlhf"], str):
            maker = peers["openrlhf"]
            contenders["openrlhf"] = (
                partial(maker.get_advantages_and_returns, None, values, rewards, mask_f, gamma, lam),
                1,
            )
        times = interleaved_medians(contenders, device, rounds=3 if length > 8192 else 5)
        bandwidth = probe.bytes / times["copy"]
        bandwidths.append(bandwidth)
        ours = times["whileai"]
        floor = 17 * batch * length / bandwidth
        cells = [str(length), fmt_ms(ours), fmt_ms(floor), f"{ours / floor:.1f}"]
        verdicts[f"gae floor T={length}"] = ours / floor
        if "verl" in times:
            verdicts[f"gae verl T={length}"] = times["verl"] / ours
        for peer in ("verl", "openrlhf"):
            cells += [fmt_ms(times[peer]), f"{times[peer] / ours:.0f}x"] if peer in times else ["n/a", "n/a"]
        rows.append("| " + " | ".join(cells) + " |")
    return rows, statistics.median(bandwidths)


def _ours_outcome(estimator: Callable, token_rewards: torch.Tensor, response_mask: torch.Tensor, group: int):
    """whileai on verl's inputs and outputs: token rewards [N, 1] in, token advantages [N, 1] out."""
    return estimator(token_rewards.sum(-1), group)[:, None] * response_mask


def bench_groups(peers: dict[str, object], device: torch.device, quick: bool, verdicts: dict[str, float]) -> list[str]:
    rows = ["| estimator | N | G | whileai ms | verl vectorized ms | ratio | verl loop ms | loop ratio |"]
    rows.append("|---|---|---|---|---|---|---|---|")
    core = None if isinstance(peers["verl"], str) else peers["verl"]
    gen = torch.Generator().manual_seed(1)
    estimators = {
        "GRPO": (group_advantages, "compute_grpo_vectorized_outcome_advantage", "compute_grpo_outcome_advantage"),
        "RLOO": (rloo_advantages, "compute_rloo_vectorized_outcome_advantage", "compute_rloo_outcome_advantage"),
    }
    for episodes in (4096, 65536) if quick else (4096, 65536, 262144):
        for group in (8, 16):
            token_rewards = (torch.rand(episodes, 1, generator=gen) < 0.3).float().to(device)  # [N, 1]
            response_mask = torch.ones(episodes, 1, device=device)  # [N, 1]
            index = np.repeat(np.arange(episodes // group), group)  # verl's uid per episode, as integers
            for name, (estimator, vectorized, loop) in estimators.items():
                contenders = {"whileai": (partial(_ours_outcome, estimator, token_rewards, response_mask, group), 3)}
                if core is not None:
                    contenders["verl"] = (partial(getattr(core, vectorized), token_rewards, response_mask, index), 1)
                times = interleaved_medians(contenders, device, rounds=15)
                ours = times["whileai"]
                cells = [name, str(episodes), str(group), fmt_ms(ours)]
                if core is None:
                    rows.append("| " + " | ".join([*cells, "n/a", "n/a", "n/a", "n/a"]) + " |")
                    continue
                cells += [fmt_ms(times["verl"]), f"{times['verl'] / ours:.1f}x"]
                verdicts[f"{name} N={episodes} G={group}"] = times["verl"] / ours
                if episodes <= 4096:  # the per-episode Python loops take seconds beyond this
                    slow = getattr(core, loop)
                    looped = interleaved_medians(
                        {"loop": (lambda f=slow, x=token_rewards, m=response_mask, i=index: f(x.clone(), m, i), 1)},
                        device,
                        rounds=3,
                    )["loop"]
                    cells += [fmt_ms(looped), f"{looped / ours:.0f}x"]
                else:
                    cells += ["-", "-"]
                rows.append("| " + " | ".join(cells) + " |")
    return rows


def check_agreement(peers: dict[str, object], device: torch.device) -> list[str]:
    """The numbers being timed agree where the methods agree (no tool spans; verl's std epsilon differs)."""
    notes = []
    gen = torch.Generator().manual_seed(2)
    mask = torch.ones(4, 300, device=device)
    rewards = torch.randn(4, 300, generator=gen).to(device)
    values = torch.randn(4, 300, generator=gen).to(device)
    ours, targets = gae_advantages(rewards, values, mask, 0.99, 0.95)
    if not isinstance(peers["verl"], str):
        _, returns = peers["verl"].compute_gae_advantage_return(rewards, values, mask, 0.99, 0.95)
        notes.append(
            f"verl returns vs whileai value targets, no tool spans: max |diff| {(returns - targets).abs().max():.1e}"
        )
    if not isinstance(peers["openrlhf"], str):
        adv, _ = peers["openrlhf"].get_advantages_and_returns(None, values, rewards, mask, 0.99, 0.95)
        notes.append(f"openrlhf advantages vs whileai, no tool spans: max |diff| {(adv - ours).abs().max():.1e}")
    if not isinstance(peers["verl"], str):
        r = (torch.rand(64, 1, generator=gen) < 0.5).float().to(device)
        index = np.repeat(np.arange(8), 8)
        theirs, _ = peers["verl"].compute_rloo_vectorized_outcome_advantage(r, torch.ones_like(r), index)
        diff = (theirs[:, 0] - rloo_advantages(r[:, 0], 8)).abs().max()
        notes.append(f"verl RLOO vs whileai: max |diff| {diff:.1e}")
    return notes


def target_lines(verdicts: dict[str, float]) -> list[str]:
    def verdict(key: str, ok: Callable[[float], bool], text: str) -> str:
        if key not in verdicts:
            return f"{text}: not measured in this run"
        return f"{text}: {verdicts[key]:.1f}x, {'met' if ok(verdicts[key]) else 'MISSED'}"

    lines = [
        verdict("gae verl T=32768", lambda x: x >= 50, "masked GAE >= 50x faster than verl at T=32768"),
        verdict("gae floor T=32768", lambda x: x <= 5, "masked GAE within 5x of the memory floor at T=32768"),
    ]
    for name in ("GRPO", "RLOO"):
        for group in (8, 16):
            key = f"{name} N=262144 G={group}"
            lines.append(verdict(key, lambda x: x >= 3, f"{name} >= 3x verl's vectorized path at N=262144, G={group}"))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--quick", action="store_true", help="skip the largest sizes")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    peers = load_peers()
    print(f"device: {device} ({torch.get_num_threads()} CPU threads), torch {torch.__version__}")
    for peer in peers.values():
        if isinstance(peer, str):
            print(f"- {peer}")
    print("Carrying state across tool spans (7.1's hand-built row):\n")
    print("\n".join(hand_built_row_check(peers)))
    verdicts: dict[str, float] = {}
    gae_rows, bandwidth = bench_gae(peers, device, args.quick, verdicts)
    print("\nMasked GAE, B=64, spans of 50 policy / 30 tool tokens, gamma 0.99, lambda 0.95 (median ms):\n")
    print("\n".join(gae_rows))
    print(
        f"\nfloor: 17 bytes per element over the bandwidth of a 256 MiB copy timed in the same rounds "
        f"(median {bandwidth / 1e9:.1f} GB/s read + write)"
    )
    print("\nOutcome advantages, [N, 1] token rewards in groups of G (median ms; ratio = verl / whileai):\n")
    print("\n".join(bench_groups(peers, device, args.quick, verdicts)))
    print("\nTargets (issue 3):\n")
    print("\n".join(f"- {line}" for line in target_lines(verdicts)))
    print("\nAgreement checks:\n")
    print("\n".join(f"- {note}" for note in check_agreement(peers, device)))


if __name__ == "__main__":
    main()
