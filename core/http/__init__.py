"""The HTTP stack every call to a model endpoint goes through (the judge, a served policy, a simulated customer).

- ``endpoint``: an endpoint's settings, each declared once (URL, model, key by variable name, retries, deadlines,
  concurrency), their checks, and the errors and counters of its calls;
- ``client``: the client: retries, deadlines, one background event loop, calls at once;
- ``transport``: the one aiohttp session (redirects, size limit, streamed replies);
- ``proxies``: the environment's proxies, as httpx and curl read them;
- ``secrets``: keys and passwords kept out of every text a server sends back, and the one marker that replaces them.

The judge (``whileai.judge``) and the offline path's model agent and customer (``whileai.simulations``) build on it;
nothing here knows either. aiohttp is imported by ``transport`` only, when a client is made.
"""
