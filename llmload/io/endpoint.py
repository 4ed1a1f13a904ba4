"""The server's address: a base URL taken apart once (`Endpoint.parse`), and the streaming
client's connections to it (`connect_to`, its addresses looked up once per process).

`Endpoint` is pure, shared by the streaming client, the probe and the runner; a base URL may
end in /v1, which is not part of the prefix.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from gevent import socket


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    prefix: str
    """Path prefix before /v1/..., without a trailing slash ("" for most servers)."""

    @classmethod
    def parse(cls, base_url: str) -> "Endpoint":
        parts = urlsplit(base_url if "://" in base_url else f"http://{base_url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[:-3]
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, prefix)

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{self.prefix}"


CONNECT_TIMEOUT_S = 10.0

_ADDRESSES: dict[tuple[str, int], list[tuple]] = {}


def server_addresses(host: str, port: int) -> list[tuple]:
    """(family, sockaddr) of each address of host:port, looked up once per process: an IP
    literal needs no lookup, and a name is not looked up again for every connection (gevent's
    resolver hands each lookup to a thread pool: 1-3 ms a connection, on the send path of an
    open-loop request that finds no idle connection)."""
    key = (host, port)
    found = _ADDRESSES.get(key)
    if found is None:
        try:
            ip = ipaddress.ip_address(host.strip("[]"))
            found = [(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, (str(ip), port))]
        except ValueError:
            found = [(family, sockaddr) for family, _, _, _, sockaddr
                     in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
        _ADDRESSES[key] = found
    return found


def connect_to(host: str, port: int):
    """A TCP connection to host:port (`server_addresses` in turn, as create_connection tries them)."""
    error: OSError | None = None
    for family, sockaddr in server_addresses(host, port):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error if error is not None else OSError(f"no address for {host}:{port}")
