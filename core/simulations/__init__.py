"""The offline path: built-in support scenarios, a seeded agent, rollouts as rows, pass rates with intervals.

- ``defaults``: every knob of the reference page's defaults table, with its source.
- ``support_tools``: the order desk (orders, the five tools, their JSON schemas).
- ``scenarios``: scenario families (``builtin:refunds`` ...), their verifiers and the registry.
- ``agents``: the agent protocol and ``seeded_agent``.
- ``simulate``: rollouts of scenarios by an agent, as the rows the spread gate reads.
- ``passrate``: unbiased pass@k with Wilson and bootstrap intervals, ``score``.
- ``environment``: the scenarios as a TRL ``environment_factory``.

No key, no GPU, no download: everything here is pure Python.
"""
