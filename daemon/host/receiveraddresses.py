"""Which addresses a webhook receiver may have (README's Webhooks, docs/security.md).

A receiver URL is chosen by the operator (`WORKTRAIN_WEBHOOK_URLS`) or by a token holder (a
dispatch's `callbackUrl`), and the workers POST to it from where they run: without a rule,
a `callbackUrl` made the workers an oracle of their own network (the Redis port, a cloud
metadata service at 169.254.169.254, a service on loopback; issue 40, item 4). By default a
receiver must have a public address. Refused: loopback, link-local, private (10/8,
172.16/12, 192.168/16, 100.64/10), unique-local (fc00::/7), site-local, multicast,
unspecified and reserved addresses, and an IPv6 address that carries a refused IPv4 one
(IPv4-mapped `::ffff:127.0.0.1`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`). The operator
allows them: `WORKTRAIN_WEBHOOK_ALLOW_PRIVATE=1` all of them, `WORKTRAIN_WEBHOOK_ALLOW_NETWORKS`
some networks (`127.0.0.1/32,10.0.0.0/8`).

The rule is on addresses, never names. `allowed_addresses` resolves a host once and keeps
only the addresses the rule allows; the sender connects to those and never resolves the
name again (daemon/webhooks/sender.py), so no DNS answer that changes between a check and
a connect (rebinding) reaches a refused address. `url_refusal` is the early courtesy at
dispatch and at start: a literal address in any form the C library reads as one
(`2130706433`, `0x7f.1`, `127.1`, `[::1]`) and `localhost` are refused there with a clear
error; a name is resolved only by the sender.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
SockAddr = tuple[Any, ...]  # (host, port) or (host, port, flowinfo, scope_id)
Resolver = Callable[..., list[tuple[Any, ...]]]  # socket.getaddrinfo's signature

ALLOW_PRIVATE_VARIABLE = "WORKTRAIN_WEBHOOK_ALLOW_PRIVATE"
ALLOW_NETWORKS_VARIABLE = "WORKTRAIN_WEBHOOK_ALLOW_NETWORKS"
HOW_TO_ALLOW = f"{ALLOW_PRIVATE_VARIABLE}=1 or {ALLOW_NETWORKS_VARIABLE} allows it"
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")
_LOCALHOST = (ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1"))


class ReceiverNotAllowed(ValueError):
    """A receiver whose address the operator has not allowed (the message says why)."""


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one reaches or carries (mapped, NAT64, 6to4), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def kind_of(address: IPAddress) -> str | None:
    """What makes `address` not public ("loopback", "private", ...); None for a public one."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None and (kind := kind_of(embedded)) is not None:
            return kind
        if address.ipv4_mapped is not None or address in _NAT64:
            return None  # a public IPv4 address, reached through IPv6
    checks = (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("unspecified", address.is_unspecified),
        ("multicast", address.is_multicast),
        ("unique-local", isinstance(address, ipaddress.IPv6Address) and address in _UNIQUE_LOCAL),
        ("site-local", isinstance(address, ipaddress.IPv6Address) and address.is_site_local),
        ("private", address.is_private),
        ("reserved", address.is_reserved or not address.is_global),
    )
    return next((kind for kind, hit in checks if hit), None)


def _canonical(address: IPAddress) -> IPAddress:
    """An IPv4-mapped IPv6 address as the IPv4 address it is (what a network list names)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def parse_networks(text: str) -> tuple[Network, ...]:
    """`WORKTRAIN_WEBHOOK_ALLOW_NETWORKS`: comma-separated networks or single addresses
    (`10.0.0.0/8`, `127.0.0.1`, `fd00::/8`); ValueError names an entry that is neither."""
    networks = []
    for part in text.split(","):
        entry = part.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"{entry!r} is not a network (10.0.0.0/8) or an address (127.0.0.1)") from None
    return tuple(networks)


@dataclass(frozen=True)
class ReceiverPolicy:
    """Which non-public addresses the operator allows (none by default)."""

    allow_private: bool = False
    networks: tuple[Network, ...] = ()

    @classmethod
    def of(cls, allow_private: bool, networks: str) -> ReceiverPolicy:
        return cls(allow_private, parse_networks(networks))

    def refusal(self, address: IPAddress) -> str | None:
        """None when a receiver may have `address`, else why not."""
        kind = kind_of(address)
        canonical = _canonical(address)
        if kind is None or self.allow_private or any(canonical in network for network in self.networks):
            return None
        return f"{address} is a {kind} address"


def literal_address(host: str) -> IPAddress | None:
    """`host` (a URL's hostname, brackets gone) as the address the C library reads it as
    (`2130706433`, `0x7f.1` and `127.1` included), or None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))  # the forms getaddrinfo takes too
    except (OSError, ValueError):
        return None


def host_refusal(host: str, policy: ReceiverPolicy) -> str | None:
    """Why `host` is refused without resolving anything (None: allowed, or a name only the
    sender can judge once resolved)."""
    name = host.rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):  # RFC 6761: always loopback
        refusals = [policy.refusal(address) for address in _LOCALHOST]
        return None if None in refusals else f"{host} is a loopback address"
    address = literal_address(name)
    return None if address is None else policy.refusal(address)


def url_refusal(url: str, policy: ReceiverPolicy) -> str | None:
    """Why the receiver `url` is refused before any lookup (None: not refused yet)."""
    host = urlsplit(url).hostname
    return None if host is None else host_refusal(host, policy)


def allowed_addresses(
    host: str, port: int, policy: ReceiverPolicy, resolver: Resolver | None = None
) -> list[tuple[int, SockAddr]]:
    """`host` resolved once (by `resolver`, default socket.getaddrinfo): the (family, socket
    address) pairs the policy allows, in the resolver's order. ReceiverNotAllowed when it
    allows none (OSError: no answer at all)."""
    answers = (resolver or socket.getaddrinfo)(host, port, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    allowed: list[tuple[int, SockAddr]] = []
    refusals: list[str] = []
    for family, _type, _proto, _name, sockaddr in answers:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        why = policy.refusal(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
        if why is None:
            allowed.append((family, tuple(sockaddr)))
        else:
            refusals.append(why)
    if not allowed:
        raise ReceiverNotAllowed("; ".join(dict.fromkeys(refusals)) or f"{host} has no IP address")
    return allowed
