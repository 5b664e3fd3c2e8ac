"""The proxy of a URL, read from the environment as httpx (and so the openai SDK) reads it: ``HTTPS_PROXY`` or
``HTTP_PROXY`` for the URL's scheme, else ``ALL_PROXY``, unless a ``NO_PROXY`` entry matches (domain suffixes, IPs,
networks, ports). aiohttp's own ``trust_env`` reads neither ``ALL_PROXY`` nor a network in ``NO_PROXY``. Pure: reads
the environment, opens nothing.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
import urllib.request
from collections.abc import Mapping

from whileai.errors import BadInput
from whileai.http.secrets import masked_url

__all__ = ["proxy_for"]


def _split_port(entry: str) -> tuple[str, int | None]:
    host, sep, port = entry.rpartition(":")
    if sep and port.isdigit() and host and not host.endswith(":"):
        return host, int(port)
    return entry, None


def _host_matches(pattern: str, host: str) -> bool:
    """A ``NO_PROXY`` host entry against a host name, as httpx reads it: ``example.com`` and ``*example.com`` match
    the name and its subdomains, ``.example.com`` and ``*.example.com`` its subdomains only, an IP or
    ``localhost`` itself only, an IP network (``10.0.0.0/8``) its addresses."""
    host = host.lower().strip("[]")
    pattern = pattern.lower()
    if "/" in pattern:  # an address network
        try:
            return ipaddress.ip_address(host) in ipaddress.ip_network(pattern.strip("[]"), strict=False)
        except ValueError:
            return False
    bare = pattern.strip("[]")
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        pass
    else:
        return host == bare
    if pattern == "localhost":
        return host == "localhost"
    if pattern.startswith("*."):
        pattern = pattern[1:]
    if pattern.startswith("."):
        return host.endswith(pattern) and len(host) > len(pattern)
    domain = pattern.lstrip("*")
    return host == domain or host.endswith("." + domain)


def _bypassed(entry: str, scheme: str, host: str, port: int | None) -> bool:
    """Whether one ``NO_PROXY`` entry sends ``scheme://host:port`` direct."""
    if "://" in entry:
        parts = urllib.parse.urlsplit(entry)
        if parts.scheme not in ("all", scheme):
            return False
        try:
            wanted_port = parts.port
        except ValueError:
            return False
        if wanted_port is not None and wanted_port != port:
            return False
        return not parts.hostname or _host_matches(parts.hostname, host)
    if entry.startswith("[") or "/" in entry or entry.count(":") > 1:  # an IPv6 address or a network: no port
        return _host_matches(entry, host)
    name, wanted = _split_port(entry)
    return (wanted is None or wanted == port) and _host_matches(name, host)


def proxy_for(url: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy the environment gives ``url``, read as httpx (and so the openai SDK) reads it; None: direct.

    ``HTTPS_PROXY`` or ``HTTP_PROXY`` for the URL's scheme, else ``ALL_PROXY`` (lower-case names win, a proxy without
    a scheme is ``http://``), unless a ``NO_PROXY`` entry matches (``*`` matches everything).

    Raises:
        BadInput: the proxy is not ``http://`` or ``https://`` (a ``socks5://`` one, say): aiohttp speaks neither
            SOCKS nor anything else to a proxy, and the request, its key included, must not go to a port that
            expects another protocol. The message names the variable, its password masked.

    Example:
        >>> env = {"http_proxy": "proxy:3128", "no_proxy": ".internal,10.0.0.0/8"}
        >>> proxy_for("http://judge.internal/v1", env), proxy_for("http://internal/v1", env)
        (None, 'http://proxy:3128')
    """
    if environ is None:
        proxies = urllib.request.getproxies_environment()
    else:
        proxies = {}
        for name, value in sorted(environ.items(), key=lambda item: item[0].islower()):  # lower-case last: it wins
            if value and name.lower().endswith("_proxy"):
                proxies[name.lower()[: -len("_proxy")]] = value
    parts = urllib.parse.urlsplit(url)
    scheme, host = parts.scheme, parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    for entry in (e.strip() for e in proxies.get("no", "").split(",")):
        if entry == "*":
            return None
        if entry and _bypassed(entry, scheme, host, port):
            return None
    variable = scheme if proxies.get(scheme) else "all"
    proxy = proxies.get(variable)
    if not proxy:
        return None
    proxy = proxy if "://" in proxy else f"http://{proxy}"
    if urllib.parse.urlsplit(proxy).scheme.lower() not in ("http", "https"):
        raise BadInput(
            f"{variable.upper()}_PROXY={masked_url(proxy)}: whileai reaches a server through an HTTP or HTTPS proxy "
            f"only (it speaks no SOCKS): unset it, point it at an HTTP proxy, or add the host to NO_PROXY"
        )
    return proxy
