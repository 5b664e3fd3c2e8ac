"""The tasks a recipe trains on, in one place: ``load`` reads a recipe's ``data`` and ``verifier`` sections into a
``TrainingTask`` (a built-in task, or your own rows, prompts and environment) with its verifier; the built-in tasks
are the echo task and the support scenarios there (the support desk itself, its scenarios and agents, is
``whileai.simulations``, which ``whileai simulate`` uses too) and the arithmetic word problems (``word_problems``).
"""
