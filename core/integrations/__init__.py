"""Integrations: the trainers whileai plugs into. ``trl``: TRL's ``GRPOTrainer`` reward-function contract.
``verl``: verl 0.9's reward manager ``whileai`` (imports verl; loaded by verl's ``verl.plugins`` entry point).
``groups``: responses that arrive one at a time, held until their group is whole (what the verl manager waits in).

Imported by the training run, by ``GroupwiseGrading.trl_reward`` (the door) and by verl; nothing below imports them.
"""
