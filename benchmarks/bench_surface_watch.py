"""Does the spread watch see a grader that pays for length while the policy learns it? The main job trained with
its honest grader and with one that pays for length, the watch as shipped on ``warn``, over a few seeds.

Trains ``recipes/tiny_cpu_gar.yaml`` (60 steps, one torch thread) once per grader and seed (``trainer.seed``):
``honest`` is the recipe's rule (fewest characters first), ``pays for length`` the same rule reversed
(``grader.rule.order=descending``), trained past the gate with ``--skip-spread-gate`` (the gate refuses it, and the
table says so). Per run: the gate's verdict (``spread_gate.json``), the step at which the watch first said the grader
pays for a surface (``watch.jsonl``'s ``paid_for``), the completions' mean length in tokens over steps 1-10 and 51-60
(TRL's ``completions/mean_length``, ``whileai report --json``) and the pass rate over the same steps. With
``--plot`` it draws the mean length per step of each grader, seeds averaged, the watch's first word marked.

    python benchmarks/bench_surface_watch.py              # about 8 minutes on 2 idle cores
    python benchmarks/bench_surface_watch.py --seeds 7 --plot docs/surface_watch.png
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from processes import run_in_group, whileai_command  # the runner that ends a command's process group on every exit

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "tiny_cpu_gar.yaml"
GRADERS = {"honest": [], "pays for length": ["grader.rule.order=descending", "--skip-spread-gate"]}


def train(overrides: list[str], seed: int, folder: Path) -> dict[str, object]:
    """One run's gate verdict, watch checks and per-step logs."""
    command = ("train", str(RECIPE), "model.threads=1", f"trainer.seed={seed}", f"output_dir={folder}")
    done = run_in_group(whileai_command(*command, *overrides), timeout_s=1800)
    if done.returncode != 0:
        raise SystemExit(f"whileai train {' '.join(overrides)} exited {done.returncode}: {done.stderr[-1500:]}")
    report = run_in_group(whileai_command("report", str(folder), "--json"), timeout_s=300)
    entry = json.loads(report.stdout)["reports"][0]
    gate = json.loads((folder / "spread_gate.json").read_text())
    return {"gate": gate.get("verdict"), "watch": entry.get("watch") or [], "steps": entry["steps"]}


def window_mean(steps: list[dict[str, float]], key: str, low: int, high: int) -> float:
    values = [s[key] for s in steps if low <= s["step"] <= high and s.get(key) is not None]
    return statistics.mean(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[7, 8, 9])
    parser.add_argument("--plot", type=Path, help="draw the mean length per step to this PNG")
    options = parser.parse_args()
    runs: dict[str, list[dict[str, object]]] = {name: [] for name in GRADERS}
    with tempfile.TemporaryDirectory(prefix="whileai-surface-") as scratch:
        for seed in options.seeds:
            for name, overrides in GRADERS.items():
                folder = Path(scratch) / f"{name.replace(' ', '-')}-{seed}"
                runs[name].append(train(overrides, seed, folder))
                print(f"{name} seed {seed}: done", file=sys.stderr, flush=True)
    print("recipes/tiny_cpu_gar.yaml, 60 steps, the watch as shipped (a check every 10 steps, on_fail: warn)")
    print(f"{'grader':16} {'seed':>4} {'gate':>5} {'watch spoke':>11} {'paid for':>28} {'len 1-10':>9} "
          f"{'len 51-60':>9} {'pass 1-10':>9} {'pass 51-60':>10}")  # fmt: skip
    spoke: dict[str, list[int]] = {name: [] for name in GRADERS}
    for name, measured in runs.items():
        for seed, run in zip(options.seeds, measured, strict=True):
            steps, checks = run["steps"], run["watch"]  # type: ignore[assignment]
            first = next((c for c in checks if c.get("paid_for")), None)  # type: ignore[union-attr]
            if first is not None:
                spoke[name].append(first["step"])
            said = "-" if first is None else str(first["step"])
            paid = "" if first is None else ", ".join(first["paid_for"])
            print(
                f"{name:16} {seed:4d} {run['gate']!s:>5} {said:>11} {paid:>28} "
                f"{window_mean(steps, 'completions/mean_length', 1, 10):9.1f} "  # type: ignore[arg-type]
                f"{window_mean(steps, 'completions/mean_length', 51, 60):9.1f} "  # type: ignore[arg-type]
                f"{window_mean(steps, 'whileai/pass_rate', 1, 10):9.2f} "  # type: ignore[arg-type]
                f"{window_mean(steps, 'whileai/pass_rate', 51, 60):10.2f}"  # type: ignore[arg-type]
            )
    if options.plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axis = plt.subplots(figsize=(7, 3.5))
        for name, measured in runs.items():
            per_step: dict[int, list[float]] = {}
            for run in measured:
                for row in run["steps"]:  # type: ignore[attr-defined]
                    if row.get("completions/mean_length") is not None:
                        per_step.setdefault(int(row["step"]), []).append(row["completions/mean_length"])
            xs = sorted(per_step)
            line = axis.plot(xs, [statistics.mean(per_step[x]) for x in xs], label=name)[0]
            for step in sorted(set(spoke[name])):
                axis.axvline(step, color=line.get_color(), linestyle=":", linewidth=1)
        axis.set_xlabel("step")
        axis.set_ylabel("completion length (tokens)")
        axis.set_title(f"tiny_cpu_gar, mean of {len(options.seeds)} seeds; dotted: the watch said 'pays for'")
        axis.legend()
        figure.tight_layout()
        figure.savefig(options.plot, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
