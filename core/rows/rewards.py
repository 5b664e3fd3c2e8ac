"""A verifier's reward as TRL will store it, and which members of a group can be scored at all.

TRL 1.16 turns a reward function's ``None`` into NaN and stores every reward with ``torch.tensor(..., float32)``; a
NaN member is "unscorable": left out of its group's mean (``nanmean``) and given advantage 0. Everything whileai does
with a verifier's rewards (the reward function, the spread gate's samples, a rows file) reads them through
:func:`verifier_reward`, so the gate and training accept the same values TRL does and agree on which members count.

This module only converts numbers; it grades nothing.
"""

from __future__ import annotations

import math

__all__ = ["FLOAT32_LIMIT", "scorable_members", "verifier_reward"]

# The smallest magnitude float32 rounds to infinity (2**128 - 2**103): a finite float64 reward at or beyond it is
# inf once TRL stores it, and TRL's nan_to_num would then give the group's other members -3.4e38.
FLOAT32_LIMIT = 2.0**128 - 2.0**103


def verifier_reward(value: object) -> float:
    """One reward of a verifier as a float: NaN when TRL could not use it, a ``ValueError`` when TRL would refuse it.

    Accepted as TRL accepts them: Python numbers and bools, numpy scalars (``np.bool_`` included), one-element torch
    tensors (0-d or not), ``Decimal``, ``Fraction``, anything with ``__float__``. Unscorable (NaN): ``None``, NaN,
    infinities, an integer too large for a float, and anything float32 holds only as infinity (``1e39``). Refused:
    text, complex numbers, containers.

    Example:
        >>> verifier_reward(True), verifier_reward(None), verifier_reward(1e39)
        (1.0, nan, nan)
    """
    if type(value) is float:  # the common case first
        number: float = value  # type: ignore[assignment]
    elif value is None:
        return math.nan
    elif isinstance(value, (str, bytes, bytearray, complex)):
        raise ValueError(f"a reward is not a number: {value!r}")
    else:
        try:
            number = float(value)  # type: ignore[arg-type]
        except OverflowError:
            return math.nan
        except (TypeError, ValueError):
            raise ValueError(f"a reward is not a number: {value!r}") from None
    return number if -FLOAT32_LIMIT < number < FLOAT32_LIMIT else math.nan  # NaN fails both comparisons


def scorable_members(rewards: list[float]) -> list[int] | None:
    """The positions of a group's scorable (finite) rewards, or None when every one is.

    Example:
        >>> scorable_members([1.0, float("nan"), 0.0]), scorable_members([1.0, 0.0])
        ([0, 2], None)
    """
    isfinite = math.isfinite
    if all(map(isfinite, rewards)):
        return None
    return [i for i, r in enumerate(rewards) if isfinite(r)]
