"""Your verifier: TRL's reward-function signature, called on each batch of completions.

TRL (and whileai's reward function, which calls this first) passes every dataset column as a keyword argument, one
value per completion: here `answer`. Also `completion_ids`, `trainer_state`, and with an environment class the
rollouts' `environments`. A reward above 0 is a pass; None leaves a completion unscored.
"""


def words(text):
    return [word.strip(".,:;!?\"'").lower() for word in text.split()]


def text_of(completion):
    """A completion's text: a string for plain prompts, a list of messages for chat prompts (the last one's text)."""
    if isinstance(completion, str):
        return completion
    return completion[-1].get("content") or ""


def odd_one_out(prompts, completions, answer, **kwargs):
    """1.0 when the completion's first word is the row's answer, 0.5 when the answer comes later (partial credit),
    0.0 when it never does."""
    rewards = []
    for completion, expected in zip(completions, answer, strict=True):
        said = words(text_of(completion))
        rewards.append(1.0 if said[:1] == [expected] else 0.5 if expected in said else 0.0)
    return rewards


def desk_answer(prompts, completions, answer, environments, **kwargs):
    """The multi-turn task's verifier: the last message names the odd word, and the rollout looked at least one
    word up with the environment's tool (what the environment saw is in `environments`, one per completion)."""
    return [
        1.0 if answer_ in words(text_of(completion)) and env.looked_up else 0.0
        for completion, answer_, env in zip(completions, answer, environments, strict=True)
    ]
