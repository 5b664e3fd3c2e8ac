"""Your multi-turn task: a TRL environment class (`data.environment: my_task/desk.py:WordDesk`).

TRL makes one instance per rollout, calls `reset(**row)` with the dataset row's columns before the model's first
turn (a string it returns is added to the prompt), and offers every public method but `reset` as a tool, described
to the model from its signature and docstring. Keep state on the instance; the verifier reads it from
`environments`. Define no `get_reward`: TRL would add it as a second reward beside the grader's, and whileai refuses
that.
"""

KINDS = {
    "fruit": {"apple", "pear", "plum", "cherry", "grape", "lemon", "mango", "peach"},
    "colour": {"red", "blue", "green", "yellow", "purple", "orange", "white", "black"},
    "animal": {"horse", "sheep", "goat", "tiger", "mouse", "whale", "eagle", "camel"},
    "tool": {"hammer", "saw", "drill", "wrench", "chisel", "spanner", "pliers", "file"},
}


class WordDesk:
    def __init__(self):
        self.looked_up = []

    def reset(self, **row):
        self.looked_up = []
        return "\nYou may look words up before you answer."  # TRL appends it to the last message as it is

    def kind_of(self, word: str) -> str:
        """Say what kind of thing a word names.

        Args:
            word: the word to look up.
        """
        self.looked_up.append(word)
        found = [kind for kind, members in KINDS.items() if word.strip().lower() in members]
        return found[0] if found else "unknown"
