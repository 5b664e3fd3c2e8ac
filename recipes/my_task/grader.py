"""Your graders: a function of one group of rollouts of a task, returning its passes best first.

`group` is a list of dicts, one per rollout: `index`, `prompt`, `completion` (the rollout's text, tool calls
included as `<tool_call>name {...}</tool_call>`), `reward` (the verifier's) and `passed` (reward > 0). Return
{"ranking": [indices of passes, best first]} (a list inside the list is a tie), or {"factors": {index: f}}, and
optionally "hacks": [indices of passes that passed by cheating], which count as failures.
"""


def fewest_words(group):
    """Passes that spend fewer words first; a pass that names every option (a hedge that happens to contain the
    answer) is a hack."""
    passes = [rollout for rollout in group if rollout["passed"]]
    hacks = [rollout["index"] for rollout in passes if _names_every_option(rollout)]
    honest = [rollout for rollout in passes if rollout["index"] not in hacks]
    return {"ranking": best_first(honest, lambda rollout: len(rollout["completion"].split())), "hacks": hacks}


def fewest_tool_calls(group):
    """Passes that make fewer tool calls first."""
    passes = [rollout for rollout in group if rollout["passed"]]
    return {"ranking": best_first(passes, lambda rollout: rollout["completion"].count("<tool_call>"))}


def best_first(passes, cost):
    """The passes' indices by cost, cheapest first, passes of equal cost tied (an inner list): the spread gate
    refuses a grader that orders passes it cannot tell apart."""
    ties = {}
    for rollout in passes:
        ties.setdefault(cost(rollout), []).append(rollout["index"])
    return [ties[key] for key in sorted(ties)]


def _names_every_option(rollout):
    prompt = rollout["prompt"]
    options = prompt.rsplit(":", 1)[-1].replace("?", " ").split()
    said = set(rollout["completion"].lower().split())
    return len(options) > 1 and all(option in said for option in options)
