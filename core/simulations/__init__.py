"""The offline path: built-in support scenarios, a seeded agent, rollouts as rows, pass rates with intervals.

- ``defaults``: the reference page's defaults table where the page says it lives (defined in ``whileai.defaults``).
- ``support_tools``: the order desk (orders, the five tools, their JSON schemas).
- ``scenarios``: scenario families (``builtin:refunds`` ...), their verifiers and the registry.
- ``agents``: the agent protocol and ``seeded_agent``.
- ``model_agent``: an agent served over an OpenAI-compatible endpoint (tool calls in OpenAI's format).
- ``customer``: a model playing the customer (``simulate(..., simulator=True, customer=...)``).
- ``chat``: the chat client both use, on ``whileai.http.endpoint`` (retries, timeouts, key never logged); it does not
  import the judge.
- ``rollouts``: ``simulate``, rollouts of scenarios by an agent, as the rows the spread gate reads.
- ``passrate``: ``score`` and pass@k with its intervals (the statistics are ``whileai.stats``).
- ``environment``: the scenarios as a TRL ``environment_factory``.

The offline path (scenarios, seeded agent, simulate, passrate) needs no key, no GPU and no download; the model agent
and customer need an endpoint and import ``aiohttp`` only on their first call.
"""
