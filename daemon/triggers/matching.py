"""Whether a trigger takes an event (README's Triggers): its `events` and its `filter`. Pure.

`events` lists `event` (any action) or `event.action`. The filter's fields each must hold
(a list: any one of its values): `label` (the item carries it; for a `*.labeled` event, the
label just added is it: labelling an item with something else does not fire again),
`repo` / `project`, `author` (who acted: a webhook's sender, a polled item's author);
`not.author` and `not.label` pass an item over. A comment WorkTrain posted itself (its
report back) never fires a trigger: that would start a session about its own report.
"""

from __future__ import annotations

from daemon.triggers.events import OWN_MARK, TriggerEvent
from daemon.triggers.spec import TriggerSpec, as_list


def takes_event(events: list[str], name: str) -> bool:
    return any(name == wanted or name.startswith(f"{wanted}.") for wanted in events)


def refusal(spec: TriggerSpec, event: TriggerEvent) -> str | None:
    """Why the trigger passes this event over, or None when it takes it."""
    if not takes_event(spec.events, event.name):
        return f"{event.name} is not one of the trigger's events"
    facts = event.facts
    if facts.text is not None and OWN_MARK in facts.text:
        return "a comment WorkTrain posted"
    rule = spec.filter
    if rule is None:
        return None
    labels = as_list(rule.label)
    if labels:
        have = [facts.label_added] if facts.label_added is not None else list(facts.labels)
        if not set(labels) & set(have):
            return f"not labelled {' or '.join(labels)}"
    places = as_list(rule.repo) + as_list(rule.project)
    if places and not {facts.repo, facts.project_id} & set(places):
        return f"not in {' or '.join(places)}"
    authors = as_list(rule.author)
    if authors and facts.author not in authors:
        return f"not by {' or '.join(authors)}"
    if rule.not_ is not None:
        if facts.author is not None and facts.author in as_list(rule.not_.author):
            return f"by {facts.author}, whom the filter passes over"
        passed_over = set(as_list(rule.not_.label)) & set(facts.labels)
        if passed_over:
            return f"labelled {sorted(passed_over)[0]}, which the filter passes over"
    return None
