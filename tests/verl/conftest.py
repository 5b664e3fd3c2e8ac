"""The verl environment's tests: verl 0.9.1's own code (DataProto, the reward-loop registry and worker, GRPO).

verl pins transformers below what TRL needs, so these run in their own environment (``.ci/verl``, which sets
``WHILEAI_REQUIRE_VERL=1``: there a verl that does not import is a failure, not a skip). In the main environment,
which has no verl, each module skips itself.
"""

from __future__ import annotations

import os

if os.environ.get("WHILEAI_REQUIRE_VERL") == "1":
    import verl  # noqa: F401
