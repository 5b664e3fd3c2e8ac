"""Integrations: the trainers whileai plugs into. ``trl``: TRL's ``GRPOTrainer`` reward-function contract.

Imported by the training run and by ``GroupwiseGrading.trl_reward`` (the door); nothing below imports them.
"""
