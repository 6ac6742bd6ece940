"""Roles: the work an agent without a role refuses, and how it says so.

`--roles publish,fetch,jobs,cache` (default all; pool.ROLES). The router asks before routing:

- without `publish`, a publish to a stream subject is answered with an error PubAck (a client's
  `js.publish` raises it); plain NATS publishes no stream captures are unaffected;
- without `fetch`, creating a consumer and pull requests (`CONSUMER.MSG.NEXT`) are refused, and
  push subscribers here are not served (the agents with the fetch role serve them);
- `jobs` gates the pipeline jobs' leases (Settings.runs_jobs), `cache` the zone cache.

nats-server has no roles; the refusal borrows its "JetStream system temporarily unavailable"
(503, err_code 10008), the error a client sees from a cluster that cannot serve it now, and says
in its description which role is missing and where to go instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from infinistream.jetstream import errors
from infinistream.jetstream.api import TYPE_PREFIX, encode
from infinistream.jetstream.messages import status
from infinistream.pool.members import FETCH, PUBLISH

_CONSUMER_CREATE = (["CONSUMER", "CREATE"], ["CONSUMER", "DURABLE", "CREATE"])
# The status a refused pull request is answered with (a pull request answers with a status
# header, not JSON): 503, like every refusal for want of a role, which is also what a client
# gets where nothing serves the request; clients stop the fetch and raise it at once (a 409
# would have nats-py retry it until its timeout).
FETCH_REFUSED_STATUS = 503
FETCH_REFUSED_TEXT = "Fetch Role Required"


def role_error(role: str, roles: tuple[str, ...], doing: str) -> errors.ApiError:
    spec = errors.ERRORS["JSClusterNotAvailErr"]
    return errors.ApiError(
        spec.code,
        spec.err_code,
        f"this agent does not {doing}: it lacks the {role} role (its roles: {','.join(roles)});"
        f" use an agent of the pool with the {role} role",
    )


@dataclass(frozen=True)
class RoleGate:
    roles: tuple[str, ...]

    @property
    def publishes(self) -> bool:
        return PUBLISH in self.roles

    @property
    def fetches(self) -> bool:
        return FETCH in self.roles

    def publish_refusal(self) -> errors.ApiError:
        return role_error(PUBLISH, self.roles, "take publishes")

    def api_refusal(self, tokens: list[str]) -> tuple[bytes | None, bytes] | None:
        """The answer (headers, payload) refusing this `$JS.API` request, or None to serve it.

        `tokens` is the subject split on dots.
        """
        if self.fetches or len(tokens) < 4:
            return None
        if tokens[2:5] == ["CONSUMER", "MSG", "NEXT"]:
            return status(FETCH_REFUSED_STATUS, FETCH_REFUSED_TEXT), b""
        if any(tokens[2 : 2 + len(p)] == p for p in _CONSUMER_CREATE):
            error = role_error(FETCH, self.roles, "serve consumers")
            kind = TYPE_PREFIX + "consumer_create_response"
            return None, encode({"type": kind, "error": error.to_dict()})
        return None
