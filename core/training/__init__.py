"""Training with TRL's ``GRPOTrainer`` and the groupwise grader: the plan (no torch) and the run (torch, trl).

``plan`` describes what ``whileai train`` will do from a validated recipe and imports nothing heavy; ``run`` is the
only module here that imports torch, transformers and trl, inside its functions.
"""
