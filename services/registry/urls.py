"""Which endpoint URLs the registry accepts.

The registry probes every URL it holds (with the replicas' API key) and the proxy routes agents'
calls to them, so a URL is a request the platform will make on someone's behalf: it must name a
plain HTTP(S) server, with no credentials in it (they would be logged and shown in every list)
and not a link-local or cloud-metadata address (169.254.169.254 answers with node credentials).
Loopback and private addresses stay allowed: local runs and pod IPs are exactly those.
"""

from __future__ import annotations

import ipaddress

from pydantic import HttpUrl

METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "metadata.azure.com", "instance-data",
                            "instance-data.ec2.internal"})


def url_problem(url: HttpUrl) -> str | None:
    """Why ``url`` may not be registered, or None."""
    if url.scheme not in ("http", "https"):
        return f"scheme {url.scheme!r} is not http or https"
    if url.username or url.password:
        return "credentials in the URL are not accepted (the registry shows URLs to every reader)"
    if url.query or url.fragment:
        return "a base URL has no query or fragment"
    host = (url.host or "").strip("[]").rstrip(".").lower()
    if host in METADATA_HOSTS:
        return f"{host} is a cloud metadata service"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_link_local or address.is_multicast or address.is_unspecified or address.is_reserved:
        return f"{address} is a link-local, multicast, unspecified or reserved address"
    if address == ipaddress.ip_address("fd00:ec2::254"):
        return f"{address} is a cloud metadata service"
    return None
