"""`GET /api/v2/openapi.json` (README's HTTP API): an OpenAPI 3.1 document built from the route table
(web/routes.py) and the pydantic models that validate requests (web/models.py) and describe
answers (web/replies.py). Nothing in it is written by hand twice; the test suite fuzzes a
running server against it (schemathesis, tests/web/test_openapi_fuzz.py).
"""

from __future__ import annotations

import functools
import re
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from daemon.host.ids import SESSION_ID_RE, TRIGGER_ID_RE
from web.replies import ErrorReply
from web.routes import ROUTES, Reply, Route

REF = "#/components/schemas/{model}"
_RULE_PARAM = re.compile(r"<(?:(\w+):)?(\w+)>")
PATH_PARAMS: dict[str, tuple[str, dict[str, Any]]] = {
    "session_id": ("sessionId", {"type": "string", "pattern": SESSION_ID_RE.pattern}),
    "trigger_id": ("triggerId", {"type": "string", "pattern": TRIGGER_ID_RE.pattern}),
}
SHARED_REPLIES: dict[str, Reply] = {
    "400": Reply("`invalid_request`: a field, query argument or header is invalid."),
    "401": Reply("`unauthorized`: WORKTRAIN_API_TOKEN is set and the bearer token is missing or wrong."),
    "403": Reply(
        "`forbidden_host`: no token is set and the Host is not a loopback name; or, for a state "
        "change, `forbidden_origin`: a request from a page on another site."
    ),
    "413": Reply("`payload_too_large`: the body is over 1 MiB."),
    "415": Reply("`unsupported_media_type`: the body is not application/json."),
    "503": Reply(
        "Redis is unreachable (`steer_bus_unavailable`), or a standalone console (`standalone_unavailable`).",
        headers=("Retry-After",),
    ),
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def openapi_path(rule: str) -> tuple[str, list[dict[str, Any]]]:
    """A Flask rule as an OpenAPI path template, with its path parameters."""
    params: list[dict[str, Any]] = []

    def replace(match: re.Match[str]) -> str:
        converter, name = match[1], match[2]
        public, schema = PATH_PARAMS.get(name, (_camel(name), {"type": "string"}))
        if converter == "int":
            schema = {"type": "integer", "minimum": 0}
        params.append({"name": public, "in": "path", "required": True, "schema": schema})
        return "{" + public + "}"

    return _RULE_PARAM.sub(replace, rule), params


def _models(routes: tuple[Route, ...]) -> list[tuple[type[BaseModel], JsonSchemaMode]]:
    wanted: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {(ErrorReply, "serialization"): None}
    for route in routes:
        for model in (route.body, route.query):
            if model is not None:
                wanted[(model, "validation")] = None
        for reply in route.replies.values():
            if reply.model is not None:
                wanted[(reply.model, "serialization")] = None
    return list(wanted)


NOT_GIVEN = {"type": "string", "maxLength": 0}  # `?name=`: an empty value means "not given"


def _query_params(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """A query model's properties as query parameters (`null` and "" are "not given")."""
    params = []
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        prop = dict(prop)
        options = [o for o in prop.pop("anyOf", []) if o.get("type") != "null"]
        if len(options) == 1:
            prop.update(options[0])
        elif options:
            prop["anyOf"] = options
        if prop.get("default") is None:
            prop.pop("default", None)
        description = prop.pop("description", None)
        title = prop.pop("title", None)
        schema_ = {"anyOf": [prop, NOT_GIVEN], "title": title} if title else {"anyOf": [prop, NOT_GIVEN]}
        param = {"name": name, "in": "query", "required": name in required, "schema": schema_}
        if description:
            param["description"] = description
        params.append(param)
    return params


STREAM_ID = r"^[0-9]{1,20}-[0-9]{1,20}$"


def _event_message(event_type: Any, name: str, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of one Server-Sent Event whose `data` is the JSON of `event_type`, named
    `name` (schemathesis checks each message of a stream against it)."""
    if name not in defs:
        schema = TypeAdapter(event_type).json_schema(ref_template=REF, mode="serialization")
        defs.update(schema.pop("$defs", {}))
        defs[name] = schema
    data = {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {"$ref": REF.format(model=name)},
    }
    return {
        "type": "object",
        "required": ["data", "event", "id"],
        "properties": {
            "data": data,
            "event": {"type": "string"},
            "id": {"type": "string", "pattern": STREAM_ID},
        },
    }


def _response(
    reply: Reply, refs: dict[type[BaseModel], dict[str, Any]], defs: dict[str, Any]
) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": reply.description}
    if reply.events is not None:
        schema = _event_message(reply.events, reply.events_name, defs)
    else:
        schema = refs[reply.model] if reply.model is not None else {"type": "string"}
    answer["content"] = {reply.media: {"schema": schema}}
    if reply.headers:
        answer["headers"] = {name: {"schema": {"type": "string"}} for name in reply.headers}
    return answer


def _operation(
    route: Route, refs: dict[type[BaseModel], dict[str, Any]], defs: dict[str, Any]
) -> dict[str, Any]:
    _, params = openapi_path(route.rule)
    if route.query is not None:
        query_ref = refs[route.query]["$ref"].rsplit("/", 1)[1]
        params += _query_params(defs[query_ref])
    for header in route.headers:
        schema: dict[str, Any] = {"type": "string"}
        if header.pattern:
            schema["pattern"] = header.pattern
        params.append({"name": header.name, "in": "header", "required": False, "schema": schema,
                       "description": header.description})  # fmt: skip
    shared = []
    guarded = route.api and route.auth == "bearer"
    if guarded:
        shared += ["401", "403", "503"]
    elif route.api:
        shared.append("503")
    if route.query is not None or route.headers or route.body is not None:
        shared.append("400")
    if route.body is not None:
        shared += ["413", "415"]
    elif route.method in ("POST", "PATCH", "DELETE") and guarded:
        shared.append("415")  # a state change is declared JSON, body or not (web/auth.py)
    responses = {code: _response(SHARED_REPLIES[code], refs, defs) for code in shared}
    responses.update({str(status): _response(reply, refs, defs) for status, reply in route.replies.items()})
    operation: dict[str, Any] = {
        "operationId": route.name,
        "summary": route.summary,
        "tags": list(route.tags),
        "parameters": params,
        "responses": dict(sorted(responses.items())),
        "security": [{"bearer": []}, {}] if guarded else [],
    }
    if route.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": refs[route.body]}},
        }
    return operation


def build_document(routes: tuple[Route, ...] = ROUTES, workflow_ids: tuple[str, ...] = ()) -> dict[str, Any]:
    """The document; `workflow_ids` (the catalog) become the enum of a dispatch's workflowId."""
    models = _models(routes)
    mapping, top = models_json_schema(models, ref_template=REF)
    defs: dict[str, Any] = top.get("$defs", {})
    if workflow_ids and "DispatchBody" in defs:
        defs["DispatchBody"]["properties"]["workflowId"]["enum"] = list(workflow_ids)
    refs = {model: mapping[(model, mode)] for model, mode in models}
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        path, _ = openapi_path(route.path)
        paths.setdefault(path, {})[route.method.lower()] = _operation(route, refs, defs)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "WorkTrain API",
            "version": _package_version(),
            "description": "Dispatch LLM agent sessions and steer them while they run (README's HTTP API).",
        },
        "paths": paths,
        "components": {
            "schemas": defs,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _package_version() -> str:
    try:
        return version("worktrain")
    except PackageNotFoundError:
        return "0"


@functools.cache
def document(workflow_ids: tuple[str, ...] = ()) -> dict[str, Any]:
    """The document (built once per process and catalog: the table does not change at run time)."""
    return build_document(ROUTES, workflow_ids)
