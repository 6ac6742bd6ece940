"""Who an agent is to etcd: TLS (the CA that signed the members' certificates, a client
certificate) and etcd authentication (a user and password, exchanged for a token).

Production clusters run with `--client-cert-auth` and `--auth-token`; an agent presents its
client certificate in every TLS handshake and its token in the `Authorization` header of every
request (the JSON gateway's way). The files are read again when one of them changes on disk, so
a renewed certificate is picked up by the next connection without a restart; a token etcd no
longer takes (expired, or the user's password changed) is replaced by authenticating again.
What went wrong is said in words (`describe`): a TLS alert, a refused login, never a traceback.
"""

from __future__ import annotations

import os
import ssl
import time
from dataclasses import dataclass, field

from infinistream.metadata.kv import MetadataError

# How often the certificate files are looked at for a change.
CHECK_INTERVAL = 1.0


@dataclass(frozen=True)
class EtcdAccess:
    """Settings from the metadata URL (`cacert`, `cert`, `key`, `user`, and `password` or
    `password_file`). A password file is read at each login, so fixing it needs no restart."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    password_file: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("a client certificate needs both cert and key")
        if self.password is not None and self.password_file is not None:
            raise ValueError("give the etcd password or a password file, not both")
        has_password = self.password is not None or self.password_file is not None
        if (self.user is None) != (not has_password):
            raise ValueError("etcd authentication needs both a user and a password")

    def secret(self) -> str:
        """The password (read from its file now, without the line's end)."""
        if self.password_file is None:
            return self.password or ""
        try:
            with open(self.password_file, encoding="utf-8") as f:
                return f.read().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise MetadataError(f"etcd password file {self.password_file}: {_why(exc)}") from None

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(f for f in (self.ca_file, self.cert_file, self.key_file) if f is not None)


class TlsFiles:
    """The SSL context made from an `EtcdAccess`'s files, made again when they change."""

    def __init__(self, access: EtcdAccess) -> None:
        self.access = access
        self._stamp = self._read_stamp()
        self._checked = time.monotonic()

    def context(self) -> ssl.SSLContext:
        """A client context that verifies the members against `ca_file` (the system CAs
        without one) and presents the client certificate; MetadataError if a file is bad."""
        a = self.access
        try:
            context = ssl.create_default_context(cafile=a.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise MetadataError(
                f"etcd TLS: cannot load the CA file {a.ca_file}: {_why(exc)}"
            ) from None
        if a.cert_file is not None and a.key_file is not None:
            try:
                context.load_cert_chain(a.cert_file, a.key_file)
            except (OSError, ssl.SSLError) as exc:
                raise MetadataError(
                    f"etcd TLS: cannot load the client certificate {a.cert_file}"
                    f" (key {a.key_file}): {_why(exc)}"
                ) from None
        self._stamp = self._read_stamp()
        return context

    def changed(self) -> bool:
        """Whether a file changed since the last context (looked at once per interval)."""
        now = time.monotonic()
        if now - self._checked < CHECK_INTERVAL:
            return False
        self._checked = now
        return self._read_stamp() != self._stamp

    def _read_stamp(self) -> tuple[float, ...]:
        stamp = []
        for path in self.access.files:
            try:
                stat = os.stat(path)
            except OSError:
                stamp.append(-1.0)
            else:
                stamp.extend((stat.st_mtime, float(stat.st_size), float(stat.st_ino)))
        return tuple(stamp)


def describe(exc: BaseException) -> str:
    """An error talking to etcd in words: the TLS reason when TLS failed, else the message."""
    seen: BaseException | None = exc
    for _ in range(8):  # the causes of aiohttp's errors are a few levels deep at most
        if seen is None:
            break
        if isinstance(seen, ssl.SSLCertVerificationError):
            # aiohttp's own subclass keeps ssl's error in `certificate_error`.
            cause = getattr(seen, "certificate_error", seen)
            why = getattr(cause, "verify_message", None) or "verification failed"
            return f"TLS: the member's certificate is not trusted ({why})"
        if isinstance(seen, ssl.SSLError):
            return f"TLS: {_why(seen)}"
        seen = getattr(seen, "os_error", None) or seen.__cause__ or seen.__context__
    text = str(exc)
    return type(exc).__name__ if not text else f"{type(exc).__name__}: {text}"


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).lower().replace("_", " ")
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
