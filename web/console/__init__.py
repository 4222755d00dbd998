"""The browser console (README's Console): static pages that talk to `/api/v2` of their own origin.

Everything is in this package and served as it is (no build step, no CDN, works offline):
`index.html` is the one page shell for every console route (the modules in `static/js/`
draw the page for the path), `static/` holds the stylesheet, the icon and the ES modules.
The shell says two things about this server: whether it is read-only (standalone, no
Redis) and whether the API wants a bearer token; the console asks for the token itself and
keeps it in the tab's sessionStorage (never in a URL or a cookie).

The pages and files are open like /healthz: they hold no data. Every answer carries a
Content-Security-Policy that allows this origin only, so the console cannot load or send
anything elsewhere even by mistake.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from flask import Blueprint, Flask, Response, request
from werkzeug.exceptions import NotFound

from web.errors import http_error

STATIC_URL = "/console"
# The client-side routes (static/js/main.js draws each): one shell answers them all.
PAGES = {
    "/": "sessions_page",
    "/sessions/<session_id>": "session_page",
    "/dispatch": "dispatch_page",
    "/issues": "issues_page",
    "/fleet": "fleet_page",
    "/triggers": "triggers_page",
}
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}


@cache
def _shell_template() -> str:
    return (files(__name__) / "index.html").read_text(encoding="utf-8")


def shell(read_only: bool, token_required: bool) -> str:
    """The page shell, telling the modules which mode this server is in."""
    mode = "standalone" if read_only else "daemon"
    auth = "token" if token_required else "none"
    return _shell_template().replace("{{mode}}", mode).replace("{{auth}}", auth)


def _secure(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


def register_console(app: Flask, *, read_only: bool, token_required: bool) -> None:
    """Serve the console at `/` (pages) and `/console/...` (its files) on `app`."""
    page_html = shell(read_only, token_required).encode()
    blueprint = Blueprint("console", __name__, static_folder="static", static_url_path=STATIC_URL)

    def page(**_: str) -> Response:
        # no-cache: a browser revalidates, so an upgraded server's console is picked up at once.
        return Response(page_html, mimetype="text/html", headers={"Cache-Control": "no-cache"})

    for rule, name in PAGES.items():
        blueprint.add_url_rule(rule, name, page, methods=["GET"], provide_automatic_options=False)
    blueprint.after_request(_secure)
    app.register_blueprint(blueprint)

    def not_found(exc: NotFound) -> Response:
        # A browser on a path that is no page gets the console's not-found page (static/js
        # draws it), not a JSON error body; the API and every client that is no browser keep
        # the JSON answer.
        html = request.accept_mimetypes.best_match(["application/json", "text/html"]) == "text/html"
        if request.method != "GET" or not html or request.path.startswith(("/api/", STATIC_URL + "/")):
            return http_error(exc)
        response = Response(page_html, 404, mimetype="text/html", headers={"Cache-Control": "no-cache"})
        return _secure(response)

    app.register_error_handler(NotFound, not_found)
