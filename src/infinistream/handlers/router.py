"""The JetStream API: every `$JS.API.*` subject the agent serves, in one table, and the answers
nats-server gives.

`ROUTES` pairs each subject (after `$JS.API.`; `*` is one token, `>` the rest, as in a
subscription) with its handler and its response type, as nats-server's jetstream_api.go pairs
them in setJetStreamExportSubs. Every JSON response carries its `type`; a refused request
answers with the same type and an `error` object, so clients raise their usual exceptions. Pull
requests and direct gets are answered with messages and status headers instead. A subject no
route serves gets nats-server's system response with a bad-request error, but one under
`CONSUMER.MSG.NEXT` or `DIRECT.GET`, where nats-server's own subscriptions would find nothing:
no responders.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from infinistream.consumer.service import ConsumerService
from infinistream.handlers.consumers import RESET_RESPONSE, ConsumerApi
from infinistream.handlers.direct_get import DirectGet
from infinistream.handlers.responses import account_info_response, refusal
from infinistream.handlers.streams import ERASE_STATUS_TYPE, StreamApi
from infinistream.jetstream import errors
from infinistream.jetstream.api import TYPE_PREFIX, encode
from infinistream.jetstream.messages import Send, status
from infinistream.storage import KeyRefusedError
from infinistream.stream.erase import wants_erase

log = logging.getLogger(__name__)

SYSTEM_RESPONSE: Final = TYPE_PREFIX + "system_response"


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """One request on `$JS.API.>`: its subject split on dots (`tokens[2]` is the first after
    `$JS.API`), the reply subject, headers and body."""

    tokens: list[str]
    reply: str | None
    headers: bytes | None
    body: bytes


@dataclass(frozen=True, slots=True)
class _Subject:
    """An API subject after `$JS.API.`: `*` is one token, `>` one or more."""

    subject: str
    _literal: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _rest: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        tokens = tuple(self.subject.split("."))
        rest = tokens[-1] == ">"
        object.__setattr__(self, "_literal", tokens[:-1] if rest else tokens)
        object.__setattr__(self, "_rest", rest)

    def matches(self, tokens: list[str]) -> bool:
        """Whether `tokens` (`$JS.API.<...>` split on dots) is a subject of this pattern."""
        pattern = self._literal
        n = len(pattern) + 2
        if len(tokens) < n + self._rest or (not self._rest and len(tokens) != n):
            return False
        return all(p in ("*", t) for p, t in zip(pattern, tokens[2:n], strict=True))


@dataclass(frozen=True, slots=True)
class JsonRoute(_Subject):
    """A subject answered with JSON of type `response`, a refusal too; `nats` is False for
    InfiniStream's own subjects, which nats-server lacks."""

    response: str
    handler: Callable[[JetStreamApi, ApiRequest], Awaitable[dict[str, Any]]]
    nats: bool = True
    # Whether a served request counts in account info's api.total: nats-server counts what
    # its API layer answers, and answers a message get's success past it (jsMsgGetRequest).
    counted: bool = True


@dataclass(frozen=True, slots=True)
class MessageRoute(_Subject):
    """A subject answered with messages and status headers; its handler says False where
    nothing serves the request (the caller's no-responders)."""

    handler: Callable[[JetStreamApi, ApiRequest], Awaitable[bool]]


Route = JsonRoute | MessageRoute


def _js(kind: str) -> str:
    return TYPE_PREFIX + kind


_Answer = Awaitable[dict[str, Any]]


def _on_stream(
    subject: str,
    kind: str,
    call: Callable[[StreamApi, str, bytes], _Answer],
    *,
    counted: bool = True,
) -> JsonRoute:
    """A request about the stream that the subject's last token names."""
    return JsonRoute(
        subject,
        _js(kind),
        lambda api, q: call(api.streams, q.tokens[-1], q.body),
        counted=counted,
    )


def _on_consumers(
    subject: str, kind: str, call: Callable[[ConsumerApi, str, bytes], _Answer]
) -> JsonRoute:
    """A request about the consumers of the stream that the subject's last token names."""
    return JsonRoute(subject, _js(kind), lambda api, q: call(api.consumers, q.tokens[-1], q.body))


def _on_consumer(
    subject: str, kind: str, call: Callable[[ConsumerApi, str, str, bytes], _Answer]
) -> JsonRoute:
    """A request about one consumer: the subject's last two tokens name its stream and it."""
    return JsonRoute(
        subject,
        _js(kind),
        lambda api, q: call(api.consumers, q.tokens[-2], q.tokens[-1], q.body),
    )


def _consumer_create(subject: str) -> JsonRoute:
    """A create, which reads the consumer's names (and whether it is durable) off the subject."""
    return JsonRoute(
        subject,
        _js("consumer_create_response"),
        lambda api, q: api.consumers.create(q.tokens, q.body),
    )


ROUTES: Final[tuple[Route, ...]] = (
    # -- the account -------------------------------------------------------------------------
    JsonRoute("INFO", _js("account_info_response"), lambda api, q: api.account_info()),
    # -- streams -----------------------------------------------------------------------------
    _on_stream("STREAM.CREATE.*", "stream_create_response", StreamApi.create),
    _on_stream("STREAM.UPDATE.*", "stream_update_response", StreamApi.update),
    _on_stream("STREAM.INFO.*", "stream_info_response", StreamApi.info),
    _on_stream("STREAM.DELETE.*", "stream_delete_response", StreamApi.delete),
    JsonRoute(
        "STREAM.PURGE.*",
        _js("stream_purge_response"),
        lambda api, q: api.streams.purge(q.tokens[4], q.body, erase=wants_erase(q.headers)),
    ),
    JsonRoute(
        "STREAM.NAMES", _js("stream_names_response"), lambda api, q: api.streams.names(q.body)
    ),
    JsonRoute("STREAM.LIST", _js("stream_list_response"), lambda api, q: api.streams.list(q.body)),
    _on_stream("STREAM.MSG.GET.*", "stream_msg_get_response", StreamApi.get_msg, counted=False),
    _on_stream("STREAM.MSG.DELETE.*", "stream_msg_delete_response", StreamApi.delete_msg),
    JsonRoute(
        "STREAM.ERASE.STATUS.*",
        ERASE_STATUS_TYPE,
        lambda api, q: api.streams.erase_status(q.tokens[5], q.body),
        nats=False,
    ),
    MessageRoute("DIRECT.GET.*", lambda api, q: api.direct_get(q)),
    MessageRoute("DIRECT.GET.*.>", lambda api, q: api.direct_get(q)),
    # -- consumers ---------------------------------------------------------------------------
    # Pull requests, the most frequent, first: the consumer service serves them, for acks with
    # +NXT queue them too.
    MessageRoute(
        "CONSUMER.MSG.NEXT.*.*",
        lambda api, q: api.service.next_request(q.tokens[5], q.tokens[6], q.reply, q.body),
    ),
    _consumer_create("CONSUMER.CREATE.*"),
    _consumer_create("CONSUMER.CREATE.*.>"),
    _consumer_create("CONSUMER.DURABLE.CREATE.*.*"),
    _on_consumer("CONSUMER.INFO.*.*", "consumer_info_response", ConsumerApi.info),
    _on_consumer("CONSUMER.DELETE.*.*", "consumer_delete_response", ConsumerApi.delete),
    _on_consumers("CONSUMER.NAMES.*", "consumer_names_response", ConsumerApi.names),
    _on_consumers("CONSUMER.LIST.*", "consumer_list_response", ConsumerApi.list),
    MessageRoute("CONSUMER.RESET.*.*", lambda api, q: api.consumer_reset(q)),
    _on_consumer("CONSUMER.UNPIN.*.*", "consumer_unpin_response", ConsumerApi.unpin),
    _on_consumer("CONSUMER.PAUSE.*.*", "consumer_pause_response", ConsumerApi.pause),
)
# Where a subject no route serves finds no one: nats-server serves these with subscriptions of
# their own, not with its API's catch-all.
NO_RESPONDERS: Final = (("CONSUMER", "MSG", "NEXT"), ("DIRECT", "GET"))
# Where it is not answered at all: nats-server's catch-all takes it and says nothing.
UNANSWERED: Final = (("CONSUMER", "RESET"),)

_BY_AREA: Final[dict[str, tuple[Route, ...]]] = {
    area: tuple(r for r in ROUTES if r.subject.split(".")[0] == area)
    for area in {r.subject.split(".")[0] for r in ROUTES}
}


def route_for(tokens: list[str]) -> Route | None:
    """The route serving `$JS.API.<...>` split on dots into `tokens`, or None."""
    for route in _BY_AREA.get(tokens[2] if len(tokens) > 2 else "", ()):
        if route.matches(tokens):
            return route
    return None


def finds_no_one(tokens: list[str]) -> bool:
    """Whether a subject no route serves is one where nats-server finds no responders."""
    return any(tuple(tokens[2 : 2 + len(prefix)]) == prefix for prefix in NO_RESPONDERS)


def _unanswered(tokens: list[str]) -> bool:
    return any(tuple(tokens[2 : 2 + len(prefix)]) == prefix for prefix in UNANSWERED)


@dataclass(eq=False)
class JetStreamApi:
    """One account's JetStream API: every `$JS.API.>` request to its route's handler."""

    streams: StreamApi
    consumers: ConsumerApi
    # MSG.NEXT is served by the consumer service: acks with +NXT queue requests too.
    service: ConsumerService
    send: Send
    total: int = field(default=0, init=False)
    errors: int = field(default=0, init=False)
    direct: DirectGet = field(init=False)

    def __post_init__(self) -> None:
        self.direct = DirectGet(self.streams, self.send)

    async def handle(
        self, subject: str, reply: str | None, headers: bytes | None, body: bytes
    ) -> bool:
        """Serve one request on `$JS.API.>`; the answer goes to `reply`.

        False means nothing serves this subject (nats-server would have no subscription
        there), so the caller answers with no-responders where the client asked for that.
        """
        tokens = subject.split(".")
        route = route_for(tokens)
        request = ApiRequest(tokens, reply, headers, body)
        if isinstance(route, MessageRoute):
            # A pull request or a direct get: answered with messages, not JSON, and not
            # counted in api.total (nats-server's stream and consumer answer them).
            return await route.handler(self, request)
        if route is None and finds_no_one(tokens):
            return False
        if route is None and _unanswered(tokens):
            return True
        response = await self._json(route, request, subject)
        # Counted once answered, as nats-server's sendAPIResponse counts: account info's
        # own answer does not count itself.
        if route is None or route.counted or "error" in response:
            self.total += 1
        if reply:
            self.send(reply, None, encode(response))
        return True

    async def _json(
        self, route: JsonRoute | None, request: ApiRequest, subject: str
    ) -> dict[str, Any]:
        """The JSON answer of `route` (None: a subject the API does not serve)."""
        try:
            if route is None:
                raise errors.bad_request()
            return await route.handler(self, request)
        except errors.ApiError as exc:
            self.errors += 1
            return refusal(SYSTEM_RESPONSE if route is None else route.response, exc)
        except KeyRefusedError as exc:
            # Encryption at rest: a sealed object or index entry needs a key this agent does
            # not hold (wrong, or retired before `pipeline rewrap` moved it). Logged by the
            # reader; answered as nats-server answers a store that cannot read.
            self.errors += 1
            log.error("JetStream API request on %s refused: %s", subject, exc)
            error = errors.stream_store_failed(f"encryption key refused: {exc}")
            return {"type": SYSTEM_RESPONSE, "error": error.to_dict()}
        except Exception:
            log.exception("JetStream API request on %s failed", subject)
            self.errors += 1
            error = errors.stream_general("internal error")
            return {"type": SYSTEM_RESPONSE, "error": error.to_dict()}

    async def account_info(self) -> dict[str, Any]:
        return account_info_response(
            stored=await self.streams.usage(),
            consumers=await self.consumers.count_all(),
            limits=self.streams.policy.limits,
            total=self.total,
            errors_count=self.errors,
            domain=self.streams.domain,
        )

    async def consumer_reset(self, request: ApiRequest) -> bool:
        """CONSUMER.RESET, answered in JSON like the others, but not at all when there is no
        such consumer: nats-server serves it with a subscription of the consumer's own, and
        its API's catch-all leaves the request to time out."""
        if not request.reply:
            return True
        subject = ".".join(request.tokens)
        try:
            response = await self.consumers.reset(
                request.tokens[4], request.tokens[5], request.body
            )
        except errors.ApiError as exc:
            self.errors += 1
            response = {**refusal(RESET_RESPONSE, exc), "reset_seq": 0}
        except Exception:
            log.exception("JetStream API request on %s failed", subject)
            self.errors += 1
            error = errors.stream_general("internal error")
            response = {**refusal(RESET_RESPONSE, error), "reset_seq": 0}
        if response is not None:
            self.send(request.reply, None, encode(response))
        return True

    async def direct_get(self, request: ApiRequest) -> bool:
        """A direct get, answered whatever befalls it: someone waits on it."""
        if not request.reply:
            return True
        subject = ".".join(request.tokens)
        try:
            return await self.direct.serve(request.tokens, request.reply, request.body)
        except KeyRefusedError as exc:
            # Encryption at rest: the message's key is not held. Refused, never garbage.
            self.errors += 1
            log.error("JetStream direct get on %s refused: %s", subject, exc)
            self.send(request.reply, status(503, "Encryption Key Refused"), b"")
        except Exception:
            log.exception("JetStream direct get on %s failed", subject)
            self.send(request.reply, status(500, "Internal Error"), b"")
        return True
