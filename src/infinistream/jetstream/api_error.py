"""The error of a JetStream API response, as nats-server's ApiError (jetstream_errors.go).

Written by hand; `errors.py` is generated from nats-server's server/errors.json and holds one
`ErrorSpec` and one factory per error, each making its ApiError with `from_spec`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, NamedTuple


class ApiError(Exception):
    """The `error` object of a JetStream API response."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.err_code = err_code
        self.description = description

    def __str__(self) -> str:
        # Same text as nats-server's ApiError.Error().
        return f"{self.description} ({self.err_code})"

    def __repr__(self) -> str:
        return f"ApiError({self.code!r}, {self.err_code!r}, {self.description!r})"

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "err_code": self.err_code, "description": self.description}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ApiError:
        return cls(
            int(data["code"]), int(data.get("err_code", 0)), str(data.get("description", ""))
        )


class ErrorSpec(NamedTuple):
    """One entry of errors.json."""

    constant: str
    code: int
    err_code: int
    description: str


def is_api_error(err: BaseException | None, *err_codes: int) -> bool:
    """True if `err` is an ApiError with one of `err_codes` (nats-server's IsNatsErr)."""
    return isinstance(err, ApiError) and err.err_code in err_codes


_TAG_RE: Final = re.compile(r"\{(.+?)\}")


def from_spec(
    spec: ErrorSpec, unless: BaseException | None, args: Mapping[str, object] | None = None
) -> ApiError:
    """The error `spec` describes, its `{tag}`s filled in from `args`."""
    # Unless(err) in nats-server: an error that already is an ApiError is passed through.
    if isinstance(unless, ApiError):
        return unless
    description = spec.description
    if args:
        # One pass over the template, like strings.NewReplacer: a value that itself contains
        # "{tag}" is not substituted again.
        description = _TAG_RE.sub(lambda m: str(args[m[1]]) if m[1] in args else m[0], description)
    # A fresh exception each call: exceptions carry tracebacks, so they are never shared.
    return ApiError(spec.code, spec.err_code, description)
