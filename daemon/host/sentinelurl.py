"""`redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]`: the sentinels
and the service a WorkTrain tier follows (`?sentinel_password=`, `?ssl=true` and `ssl_*`
options for TLS to the data nodes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SSL_OPTIONS = (
    "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_ca_path", "ssl_check_hostname",
)  # fmt: skip


@dataclass(frozen=True)
class SentinelTarget:
    """A parsed `redis+sentinel://` URL."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None
    ssl: bool = False
    ssl_options: dict[str, str] = field(default_factory=dict)

    def where(self) -> str:
        """The sentinels and service, never a password (safe to print)."""
        return ",".join(f"{h}:{p}" for h, p in self.sentinels) + f"/{self.service}"


def is_sentinel_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SENTINEL_SCHEMES


def parse_sentinel_url(url: str) -> SentinelTarget:
    """`redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db]`
    (`?sentinel_password=`, `?ssl=true` and `ssl_*` options for TLS to the data nodes)."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in SENTINEL_SCHEMES:
        raise ValueError(f"not a Sentinel URL (scheme {parts.scheme!r})")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    sentinels = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"a Sentinel URL lists host:port pairs; got {item!r}")
        sentinels.append((host.strip("[]"), int(port)))
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ValueError("a Sentinel URL ends in /service or /service/db")
    query = dict(parse_qsl(parts.query))
    ssl = parts.scheme.lower().startswith("rediss") or query.get("ssl", "").lower() in ("1", "true", "yes")
    return SentinelTarget(
        sentinels=tuple(sentinels),
        service=path[0],
        db=int(path[1]) if len(path) == 2 else 0,
        username=unquote(username) or None,
        password=unquote(password) or None,
        sentinel_password=query.get("sentinel_password") or None,
        ssl=ssl,
        ssl_options={k: v for k, v in query.items() if k in SSL_OPTIONS},
    )
