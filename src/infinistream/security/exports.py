"""An account's `exports` and `imports`: what it offers other accounts, and what it takes from
them (nats-server's server/opts.go parseAccountExports, parseAccountImports,
parseExportStreamOrService, parseImportStreamOrService; the checks of server/accounts.go).

A service export lets another account send requests to subjects of this one (its replies go
back to the requester); a stream export lets another account receive what is published on
subjects of this one. An export with no `accounts` is public; with `accounts` only those may
import it (an empty list: none may, as nats-server then wants an activation token). An import
is refused at start unless an export of the exporting account contains its subject and allows
the importing account.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from infinistream.natsconf import ConfigError

__all__ = [
    "JS_API",
    "Export",
    "Import",
    "check_links",
    "is_subset_match",
    "jetstream_origin",
    "parse_exports",
    "parse_imports",
    "service_route",
    "stream_origins",
    "stream_route",
    "streamed",
]

# nats-server's JetStream API prefix: every API request's subject is `$JS.API.<request>`, so
# an exported API subject starts with it too.
JS_API = "$JS.API"

RESPONSE_TYPES = {
    "single": "singleton",
    "singleton": "singleton",
    "stream": "streamed",
    "chunk": "chunked",
    "chunked": "chunked",
}


class Errors(Protocol):
    """Where a config error is (config.py's file-and-line reporter)."""

    def at(self, block: Mapping[str, Any], key: str, message: str) -> ConfigError: ...


@dataclass(frozen=True, slots=True)
class Export:
    subject: str
    service: bool
    # Who may import it: None, anyone (public); otherwise these accounts.
    accounts: tuple[str, ...] | None = None
    response_type: str = "singleton"
    # account_token_position: the 1-based token of the subject that must be the importer.
    account_position: int = 0

    def allows(self, importer: str, tokens: list[str]) -> bool:
        """accounts.go checkAuth for an import of subject `tokens` by `importer`."""
        if self.account_position > 0:
            position = self.account_position
            return position <= len(tokens) and tokens[position - 1] == importer
        if self.accounts is None:
            return True
        return importer in self.accounts


@dataclass(frozen=True, slots=True)
class Import:
    account: str
    # The subject in the exporting account.
    subject: str
    # The subject in the importing account: a service's `to` (its subject by default); a
    # stream's `to`, or `prefix.subject`, or its subject.
    local: str
    service: bool


def parse_exports(errors: Errors, block: Mapping[str, Any], key: str, value: Any) -> list[Export]:
    if not isinstance(value, list):
        raise errors.at(block, key, f"Exports should be an array, got {_go_type(value)}")
    return [_export(errors, block, key, entry) for entry in value]


def _export(errors: Errors, block: Mapping[str, Any], key: str, entry: Any) -> Export:
    if not isinstance(entry, Mapping):
        raise errors.at(
            block, key, f"Export Items should be a map with type entry, got {_go_type(entry)}"
        )
    subject: str | None = None
    service: bool | None = None
    accounts: tuple[str, ...] | None = None
    response: str | None = None
    position = 0
    for mk, mv in entry.items():
        k = mk.lower()
        if k in ("stream", "service"):
            other = "service" if k == "stream" else "stream"
            if service is not None and service != (k == "service"):
                raise errors.at(entry, mk, f'Detected {k} "{mv}" but already saw a {other}')
            if not isinstance(mv, str):
                name = "stream name" if k == "stream" else "service name"
                raise errors.at(entry, mk, f"Expected {name} to be string, got {_go_type(mv)}")
            subject, service = mv, k == "service"
        elif k in ("response", "response_type"):
            if not isinstance(mv, str):
                raise errors.at(
                    entry, mk, f"Expected response type to be string, got {_go_type(mv)}"
                )
            if mv.lower() not in RESPONSE_TYPES:
                raise errors.at(entry, mk, f'Unknown response type: "{mv}"')
            response = RESPONSE_TYPES[mv.lower()]
        elif k == "accounts":
            if not isinstance(mv, list) or not all(isinstance(a, str) for a in mv):
                raise errors.at(entry, mk, "Expected accounts to be an array of account names")
            accounts = tuple(mv)
        elif k == "account_token_position":
            if isinstance(mv, bool) or not isinstance(mv, int) or mv < 0:
                raise errors.at(entry, mk, "Expected account_token_position to be a number")
            position = mv
        elif k in ("threshold", "response_threshold", "response_max_time", "response_time"):
            # Latency reporting is not kept; the value is only checked.
            if not isinstance(mv, str):
                raise errors.at(
                    entry,
                    mk,
                    "Expected response threshold to be a parseable time duration, got "
                    f"{_go_type(mv)}",
                )
        else:
            raise errors.at(entry, mk, f'unknown field "{mk}"')
    if subject is None or service is None:
        raise errors.at(block, key, "Export Items should be a map with type entry")
    if response is not None and not service:
        response_key = next(k for k in entry if k.lower() in ("response", "response_type"))
        raise errors.at(entry, response_key, "Detected response directive on non-service")
    if position > 0:
        tokens = subject.split(".")
        if len(tokens) < position or tokens[position - 1] != "*":
            raise errors.at(entry, _key(entry, "account_token_position"), "invalid subject")
    return Export(subject, service, accounts, response or "singleton", position)


def parse_imports(errors: Errors, block: Mapping[str, Any], key: str, value: Any) -> list[Import]:
    if not isinstance(value, list):
        raise errors.at(block, key, f"Imports should be an array, got {_go_type(value)}")
    imports: list[Import] = []
    for entry in value:
        found = _import(errors, block, key, entry)
        if found.service:
            for dup in imports:
                if dup.service and dup.local == found.local and dup.account == found.account:
                    raise errors.at(
                        block,
                        key,
                        f'Duplicate service import subject "{found.local}", previously used in '
                        f'import for account "{dup.account}", subject "{dup.subject}"',
                    )
        imports.append(found)
    return imports


def _import(errors: Errors, block: Mapping[str, Any], key: str, entry: Any) -> Import:
    if not isinstance(entry, Mapping):
        raise errors.at(
            block, key, f"Import Items should be a map with type entry, got {_go_type(entry)}"
        )
    kind: str | None = None
    account = subject = ""
    prefix = to = ""
    for mk, mv in entry.items():
        k = mk.lower()
        if k in ("stream", "service"):
            if kind is not None and kind != k:
                other = "service" if k == "stream" else "stream"
                raise errors.at(entry, mk, f"Detected {k} but already saw a {other}")
            if not isinstance(mv, Mapping):
                what = "Stream" if k == "stream" else "Service"
                raise errors.at(
                    entry, mk, f"{what} entry should be an account map, got {_go_type(mv)}"
                )
            account, subject = _account_subject(errors, mv)
            if not account or not subject:
                raise errors.at(entry, mk, "Expect an account name and a subject")
            kind = k
        elif k in ("prefix", "to"):
            if not isinstance(mv, str):
                raise errors.at(entry, mk, f"Expected {k} to be a string, got {_go_type(mv)}")
            if k == "prefix":
                prefix = mv
            else:
                to = mv
        elif k == "share":
            if not isinstance(mv, bool):
                raise errors.at(entry, mk, "Expected share to be a boolean")
        else:
            raise errors.at(entry, mk, f'unknown field "{mk}"')
    if kind is None:
        raise errors.at(block, key, "Import Items should be a map with type entry")
    if kind == "service":
        return Import(account, subject, to or subject, service=True)
    if prefix and to:
        raise errors.at(
            entry, _key(entry, "to"), "Stream import can not have a 'prefix' and a 'to' property"
        )
    local = to or subject
    if prefix:
        local = prefix + subject if prefix.endswith(".") else f"{prefix}.{subject}"
    return Import(account, subject, local, service=False)


def _account_subject(errors: Errors, block: Mapping[str, Any]) -> tuple[str, str]:
    account = subject = ""
    for mk, mv in block.items():
        k = mk.lower()
        if k == "account" and isinstance(mv, str):
            account = mv
        elif k == "subject" and isinstance(mv, str):
            subject = mv
        elif k not in ("account", "subject"):
            raise errors.at(block, mk, f'unknown field "{mk}"')
        else:
            raise errors.at(block, mk, f"Expected {k} to be a string, got {_go_type(mv)}")
    return account, subject


class Linked(Protocol):
    """An account as the checks need it (config.AccountSpec)."""

    @property
    def name(self) -> str: ...
    @property
    def exports(self) -> tuple[Export, ...]: ...
    @property
    def imports(self) -> tuple[Import, ...]: ...


def check_links(errors: Errors, conf: Mapping[str, Any], accounts: Iterable[Linked]) -> None:
    """Every export's accounts exist, and every import is of an account that exports it to the
    importer: nats-server's checks once all accounts are read, in its order (stream exports,
    service exports, stream imports, service imports), with its words."""
    by_name = {a.name: a for a in accounts}
    where = "accounts"
    for _, export in _streams_then_services(by_name.values(), lambda a: a.exports):
        for name in export.accounts or ():
            if name not in by_name:
                raise errors.at(
                    conf, where, f'"{name}" account not defined for {_kind(export)} export'
                )
    for account, imported in _streams_then_services(by_name.values(), lambda a: a.imports):
        kind = _kind(imported)
        exporter = by_name.get(imported.account)
        if exporter is None:
            raise errors.at(
                conf, where, f'"{imported.account}" account not defined for {kind} import'
            )
        problem = _import_problem(exporter, account.name, imported)
        if problem:
            raise errors.at(
                conf, where, f'Error adding {kind} import "{imported.subject}": {problem}'
            )


def _kind(link: Export | Import) -> str:
    return "service" if link.service else "stream"


_Link = TypeVar("_Link", Export, Import)


def _streams_then_services(
    accounts: Collection[Linked], links: Callable[[Linked], Iterable[_Link]]
) -> Iterator[tuple[Linked, _Link]]:
    """Each account's links (its exports, or its imports), stream ones before service ones:
    the order nats-server checks them in, so that the first error is the one it reports."""
    for service in (False, True):
        for account in accounts:
            for link in links(account):
                if link.service == service:
                    yield account, link


def _import_problem(exporter: Linked, importer: str, imported: Import) -> str | None:
    if not imported.service:
        local_prefix = (
            imported.local[: -len(imported.subject)]
            if imported.local.endswith(imported.subject)
            else ""
        )
        if "*" in local_prefix.split(".") or ">" in local_prefix.split("."):
            return "stream import prefix can not contain wildcard tokens"
    if not _valid_subject(imported.subject) or not _valid_subject(imported.local):
        return "invalid subject"
    if _authorized(exporter, importer, imported) is None:
        return f"{_kind(imported)} import not authorized"
    return None


def _authorized(exporter: Linked, importer: str, imported: Import) -> Export | None:
    """The export that lets `importer` import `imported` (checkStreamExportApproved,
    checkServiceExportApproved): the one of the same subject first, else the first whose
    subject contains the import's."""
    exports = [e for e in exporter.exports if e.service == imported.service]
    tokens = imported.subject.split(".")
    for export in exports:
        if export.subject == imported.subject:
            return export if export.allows(importer, []) else None
    for export in exports:
        if is_subset_match(tokens, export.subject):
            return export if export.allows(importer, tokens) else None
    return None


def is_subset_match(tokens: list[str], test: str) -> bool:
    """Whether every subject of `tokens` (which may have wildcards) is matched by the pattern
    `test` (sublist.go isSubsetMatchTokenized)."""
    test_tokens = test.split(".")
    for i, t2 in enumerate(test_tokens):
        if i >= len(tokens) or not t2:
            return False
        if t2 == ">":
            return True
        t1 = tokens[i]
        if not t1 or t1 == ">":
            return False
        if t1 == "*":
            if t2 != "*":
                return False
            continue
        if t2 != "*" and t1 != t2:
            return False
    return len(tokens) == len(test_tokens)


def _matches(pattern: str, subject: str) -> list[str] | None:
    """The tokens of the literal `subject` that the wildcards of `pattern` match, in order;
    None if `pattern` does not match it."""
    pt, st = pattern.split("."), subject.split(".")
    taken: list[str] = []
    for i, p in enumerate(pt):
        if p == ">":
            if i >= len(st):
                return None
            taken.append(".".join(st[i:]))
            return taken
        if i >= len(st):
            return None
        if p == "*":
            taken.append(st[i])
        elif p != st[i]:
            return None
    return taken if len(pt) == len(st) else None


def _fill(pattern: str, taken: list[str]) -> str:
    """`pattern` with its wildcards replaced by `taken`, in order."""
    out: list[str] = []
    it = iter(taken)
    for token in pattern.split("."):
        out.append(next(it, token) if token in ("*", ">") else token)
    return ".".join(out)


def service_route(imports: Iterable[Import], subject: str) -> tuple[str, str] | None:
    """(exporting account, its subject) for a request on `subject` in the importing account;
    None if no service import takes it."""
    for imported in imports:
        if not imported.service:
            continue
        taken = _matches(imported.local, subject)
        if taken is not None:
            return imported.account, _fill(imported.subject, taken)
    return None


def streamed(exports: Iterable[Export], subject: str) -> bool:
    """Whether the service export that serves `subject` answers with more than one message
    (response_type stream or chunked)."""
    for export in exports:
        if export.service and _matches(export.subject, subject) is not None:
            return export.response_type != "singleton"
    return False


def stream_route(imports: Iterable[Import], account: str, subject: str) -> str | None:
    """The subject in the importing account that a message published on `subject` in
    `account` arrives on; None if no stream import of that account takes it."""
    for imported in imports:
        if imported.service or imported.account != account:
            continue
        taken = _matches(imported.subject, subject)
        if taken is not None:
            if imported.local == imported.subject:
                return subject
            return _fill(imported.local, taken)
    return None


def jetstream_origin(
    imports: Iterable[Import], api: str, deliver: str, stream: str, *, mirror: bool
) -> str | None:
    """The account whose stream `stream` a mirror (or source) with `external: {api, deliver}`
    reads through the importing account's imports; None if the imports do not reach one.

    nats-server's mirror sends `<api>.CONSUMER.CREATE.<stream>` and has the consumer deliver
    to `<deliver>.M.<id>` (`.S.` for a source; `$JS.M.<id>` without a deliver prefix): the
    request must reach the JetStream API of an exporting account through a service import,
    and what that account's consumer delivers must come back unchanged through a stream
    import of the same account."""
    request = f"{api}.CONSUMER.CREATE.{stream}".replace("..", ".")
    route = service_route(imports, request)
    if route is None:
        return None
    account, subject = route
    if subject != f"{JS_API}.CONSUMER.CREATE.{stream}":
        return None
    kind = "M" if mirror else "S"
    delivered = (f"{deliver}.{kind}" if deliver else f"$JS.{kind}").replace("..", ".") + ".x"
    if stream_route(imports, account, delivered) != delivered:
        return None
    return account


def stream_origins(imports: Iterable[Import], subject: str) -> list[tuple[str, str]]:
    """(exporting account, its subject) of what arrives on the literal `subject` in the
    importing account through its stream imports."""
    found: list[tuple[str, str]] = []
    for imported in imports:
        if imported.service:
            continue
        candidate = subject
        if imported.local != imported.subject:
            if not imported.local.endswith(imported.subject):
                continue
            prefix = imported.local[: -len(imported.subject)]
            if not subject.startswith(prefix):
                continue
            candidate = subject[len(prefix) :]
        if _matches(imported.subject, candidate) is not None:
            found.append((imported.account, candidate))
    return found


def _valid_subject(subject: str) -> bool:
    if not subject or any(c.isspace() for c in subject):
        return False
    tokens = subject.split(".")
    return all(t and (t != ">" or i == len(tokens) - 1) for i, t in enumerate(tokens))


def _key(block: Mapping[str, Any], lower: str) -> str:
    return next((k for k in block if k.lower() == lower), lower)


# The Go type name nats-server's messages give a config value of each type; bool before int,
# as a bool is an int too.
_GO_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "bool"),
    (int, "int64"),
    (float, "float64"),
    (str, "string"),
    (list, "[]interface {}"),
    (Mapping, "map[string]interface {}"),
)


def _go_type(value: Any) -> str:
    """The Go type name nats-server's messages give a config value."""
    return next((name for kind, name in _GO_TYPES if isinstance(value, kind)), type(value).__name__)
