"""The providers a trigger reads (README's Triggers): GitHub, GitLab and a generic sender.

Each adapter is pure: it checks a webhook's signature by the provider's own scheme, reads
its event (name, delivery id, the item it is about, the facts the filter needs), and for
polls builds the listing URLs and reads their answers (pages, rate limits, items). The
network and Redis are elsewhere (daemon/triggers/http.py, polling.py, daemon/bus/fleet/triggers.py).
"""

from __future__ import annotations

from daemon.triggers.providers.base import Provider
from daemon.triggers.providers.generic import GENERIC
from daemon.triggers.providers.github import GITHUB
from daemon.triggers.providers.gitlab import GITLAB

PROVIDERS: dict[str, Provider] = {"github": GITHUB, "gitlab": GITLAB, "generic": GENERIC}


def provider(source: str) -> Provider:
    return PROVIDERS[source]
