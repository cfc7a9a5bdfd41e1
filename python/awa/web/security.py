"""Who may see the dashboard, and proof that a form came from it.

Authentication wraps the whole application (pages, static files, the
metrics): :class:`BasicAuth` answers 401 with ``WWW-Authenticate`` until the
browser sends the right user and password; a callback ``(request) -> bool``
(or an awaitable bool) decides by itself, and a refusal is a 401 without
that header (the application's own login is expected to take over).

CSRF: each browser gets a random nonce in a cookie; the forms carry an HMAC
of that nonce under a secret of the application, and a POST whose token
does not match is refused (403). A page of another site can neither read the
token nor forge it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeAlias

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from awa.errors import ConfigurationError

#: A callable that admits a request (true) or refuses it (false); it may be async.
AuthCallback: TypeAlias = Callable[[Request], bool | Awaitable[bool]]

#: The cookie holding a browser's CSRF nonce.
CSRF_COOKIE: Final = "awa_csrf"
#: The form field carrying the token.
CSRF_FIELD: Final = "csrf_token"
_REALM: Final = 'Basic realm="awa dashboard", charset="UTF-8"'


@dataclass(frozen=True)
class BasicAuth:
    """HTTP basic authentication with one user and password."""

    user: str
    password: str

    def __post_init__(self) -> None:
        if not self.user or ":" in self.user:
            raise ConfigurationError("basic auth: the user must be non-empty and hold no ':'")
        if not self.password:
            raise ConfigurationError("basic auth: the password must not be empty")

    @classmethod
    def parse(cls, credentials: str) -> BasicAuth:
        """``USER:PASSWORD`` (the password may hold ':')."""
        user, colon, password = credentials.partition(":")
        if not colon:
            raise ConfigurationError("basic auth must be given as USER:PASSWORD")
        return cls(user, password)

    def allows(self, request: Request) -> bool:
        """Whether the request's ``Authorization`` header names this user and
        password (compared in constant time)."""
        scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            given = base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, _, password = given.partition(":")
        same_user = hmac.compare_digest(user.encode(), self.user.encode())
        same_password = hmac.compare_digest(password.encode(), self.password.encode())
        return same_user and same_password


#: What ``create_app(auth=...)`` takes: a user and password, or a callback.
Auth: TypeAlias = BasicAuth | AuthCallback


class AuthMiddleware:
    """Lets an HTTP request through only when ``auth`` allows it."""

    def __init__(self, app: ASGIApp, auth: Auth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if await self._allows(request):
            await self.app(scope, receive, send)
            return
        await self._refusal()(scope, receive, send)

    async def _allows(self, request: Request) -> bool:
        if isinstance(self.auth, BasicAuth):
            return self.auth.allows(request)
        verdict = self.auth(request)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return verdict is True

    def _refusal(self) -> Response:
        if isinstance(self.auth, BasicAuth):
            return PlainTextResponse(
                "authentication required", 401, headers={"WWW-Authenticate": _REALM}
            )
        return PlainTextResponse("not allowed: the dashboard's auth hook refused this request", 401)


class CsrfTokens:
    """Tokens bound to a browser's nonce cookie by an HMAC under ``secret``."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    @staticmethod
    def new_nonce() -> str:
        return secrets.token_urlsafe(24)

    def token(self, nonce: str) -> str:
        return hmac.new(self._secret, nonce.encode(), hashlib.sha256).hexdigest()

    def valid(self, nonce: str | None, token: object) -> bool:
        """Whether ``token`` (a form field) was made for ``nonce`` (the cookie)."""
        if not nonce or not isinstance(token, str):
            return False
        return hmac.compare_digest(self.token(nonce), token)


def check_auth(auth: object) -> Auth | None:
    """``auth`` as ``create_app`` takes it: ``None``, a :class:`BasicAuth`, a
    ``(user, password)`` pair or a callable; anything else is a
    :class:`awa.ConfigurationError`."""
    if auth is None or isinstance(auth, BasicAuth):
        return auth
    if isinstance(auth, tuple) and len(auth) == 2 and all(isinstance(p, str) for p in auth):
        return BasicAuth(auth[0], auth[1])
    if callable(auth):
        return auth
    raise ConfigurationError(
        "auth must be None, awa.web.BasicAuth(user, password), a (user, password) pair "
        f"or a callable taking the request (got {auth!r})"
    )
