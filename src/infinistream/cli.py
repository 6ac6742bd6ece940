"""The `infinistream` command."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import gc
import hashlib
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infinistream import __version__
from infinistream.logs import LogOptions, LogSetupError, configure_logging, write_pidfile

if TYPE_CHECKING:
    from infinistream.server.agent import Agent
from infinistream.settings import (
    Settings,
    SettingsError,
    add_serve_arguments,
    normalize_go_flags,
    settings_from_args,
)


async def _serve(settings: Settings, reread: Callable[[], Settings] | None = None) -> int:
    from infinistream.server.wiring import build_agent

    log = logging.getLogger("infinistream")
    log.info("Starting InfiniStream agent, version %s", __version__)
    log.info("  Objects:  %s", settings.objects_url)
    log.info("  Metadata: %s", settings.metadata_url)
    log.info("  Group:    %s", settings.group)
    try:
        agent = build_agent(settings)
        await agent.start()
    except Exception as exc:
        # A port in use, an unusable store directory, a bad object store or metadata URL: a
        # configuration problem, reported in one line ([FTL]) as nats-server does, with exit
        # code 1 rather than a traceback (which -D still shows).
        log.critical("Cannot start: %s", exc, exc_info=log.isEnabledFor(logging.DEBUG))
        return 1
    _settle_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    # As nats-server: SIGTERM stops the agent, unless lame duck mode is already closing it.
    loop.add_signal_handler(signal.SIGTERM, _terminate, agent, stop)
    # SIGUSR2 (`--signal ldm`): lame duck mode, then the agent exits on its own.
    loop.add_signal_handler(signal.SIGUSR2, _lame_duck, agent, stop)
    if reread is not None:
        loop.add_signal_handler(signal.SIGHUP, _reload, agent, reread)
    if agent.http_port:
        log.info("Starting http monitor on %s:%d", settings.monitor_host, agent.http_port)
    log.info("Listening for client connections on %s:%d", settings.host, agent.port)
    log.info("Server is ready")
    await stop.wait()
    log.info("Initiating Shutdown...")
    await agent.stop()
    log.info("Server Exiting..")
    return 0


def _settle_heap() -> None:
    """What starting made (modules, classes, the stores' handles) lives as long as the
    process: out of the cyclic collector's sight, so that a full collection, which holds the
    loop while it walks what the collector tracks, walks only what serving made
    (docs/benchmarks.md, the pauses of the loop). Collected first: what is frozen is never
    freed."""
    gc.collect()
    gc.freeze()


def _terminate(agent: Agent, stop: asyncio.Event) -> None:
    if not agent.lame_duck_mode:
        stop.set()


def _lame_duck(agent: Agent, stop: asyncio.Event) -> None:
    log = logging.getLogger("infinistream")
    log.info('Trapped "user defined signal 2" signal')
    if agent.lame_duck_mode:
        return
    task = asyncio.get_running_loop().create_task(agent.lame_duck())
    # The agent has closed its clients and left: the process ends as after SIGTERM.
    task.add_done_callback(lambda _: stop.set())
    _LAME_DUCK_TASKS.add(task)


# The lame duck task, held so it is not collected while it runs.
_LAME_DUCK_TASKS: set[asyncio.Task[None]] = set()


def _reload(agent: Agent, reread: Callable[[], Settings]) -> None:
    """SIGHUP, as nats-server's reload: users, permissions and accounts from the config file
    again, for new connections and for the permissions of existing ones. A file with an error
    changes nothing (the old configuration stays) and says why."""
    log = logging.getLogger("infinistream")
    try:
        settings = reread()
    except SettingsError as exc:
        log.error("Failed to reload server configuration: %s", exc)
        return
    closed = agent.reload_auth(settings.auth)
    log.info("Reloaded server configuration (authorization; %d client(s) closed)", closed)


def _run(coro: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    # Outside the try: an ImportError raised while serving must not rerun the coroutine.
    return uvloop.run(coro)  # type: ignore[no-any-return]


def _bench(argv: list[str]) -> int:
    try:
        from infinistream_bench.cli import main as bench_main
    except ImportError as exc:
        # The suite itself, or one of its own dependencies (nats-py, matplotlib), is missing.
        what = "is not installed" if exc.name == "infinistream_bench" else f"cannot start ({exc})"
        print(
            f"infinistream bench: the benchmark suite {what}; install it from the repository"
            " with `pip install ./bench`",
            file=sys.stderr,
        )
        return 2
    return bench_main(argv)


def _parser(command: str | None) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command line, and its `serve` subcommand. The pipeline jobs' own flags are added
    only when `command` is `pipeline`: `serve` imports nothing of the pipeline."""
    parser = argparse.ArgumentParser(
        prog="infinistream",
        description="A NATS JetStream server whose stateless agents keep data in object storage.",
    )
    parser.add_argument("--version", action="version", version=f"infinistream {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    # A short usage line: an error is one line under it, not under a screen of flags.
    serve = commands.add_parser(
        "serve", help="run an agent", usage="%(prog)s [flags] (-h lists them)"
    )
    add_serve_arguments(serve)
    # nats-server's -v and -t.
    serve.add_argument("-v", "--version", action="version", version=f"infinistream: v{__version__}")
    serve.add_argument(
        "-t", dest="check_config", action="store_true", help="Check configuration and exit"
    )
    pipeline = commands.add_parser(
        "pipeline", help="run a data pipeline job on Spark (the [pipeline] extra)"
    )
    if command == "pipeline":
        from infinistream.pipeline.commands import add_job_parsers

        add_job_parsers(pipeline)
    # Listed for --help only: the benchmark suite is a distribution of its own (bench/ in the
    # repository) and parses its own arguments (_bench).
    commands.add_parser("bench", help="benchmark against nats-server (pip install ./bench)")
    return parser, serve


def _unrecognized(parser: argparse.ArgumentParser, extra: list[str]) -> str:
    """argparse's "unrecognized arguments", with the flag each unknown one most likely
    misspells."""
    known = [o for o in parser._option_string_actions if o.startswith("--")]
    guesses = []
    for arg in extra:
        name = arg.partition("=")[0]
        if name.startswith("-"):
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
            guesses += [f"{name}: did you mean {close[0]}?"] if close else []
    hint = f" ({'; '.join(guesses)})" if guesses else ""
    return f"unrecognized arguments: {' '.join(extra)}{hint}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else None
    if command == "bench":
        return _bench(argv[1:])
    parser, serve = _parser(command)
    if command == "serve":
        argv = ["serve", *normalize_go_flags(argv[1:])]
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "serve":
        serve.error(_unrecognized(serve, extra))
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "serve":
        return _serve_command(args, argv)
    if args.command == "pipeline":
        from infinistream.pipeline.commands import run_pipeline

        configure_logging(LogOptions())
        return run_pipeline(args)
    return 2


def _serve_command(args: argparse.Namespace, argv: list[str]) -> int:
    if args.signal is not None:
        return _send_signal(args.signal)
    if args.check_config and not args.config:
        print(
            "infinistream: must specify [-c, --config] option to check configuration file syntax",
            file=sys.stderr,
        )
        return 1
    try:
        settings = settings_from_args(args)
    except SettingsError as exc:
        print(f"infinistream: {exc}", file=sys.stderr)
        return 2
    if args.check_config:
        digest = hashlib.sha256(Path(args.config).read_bytes()).hexdigest()
        print(
            f"infinistream: configuration file {args.config} is valid (sha256:{digest})",
            file=sys.stderr,
        )
        return 0
    try:
        configure_logging(settings.log)
        # Workers (--reuse-port) share their supervisor's pid file, written once by it.
        if settings.log.pidfile and not settings.reuse_port:
            write_pidfile(settings.log.pidfile)
    except LogSetupError as exc:
        # As nats-server, which cannot log where it was told to: one line, exit 1.
        print(f"infinistream: {exc}", file=sys.stderr)
        return 1
    if settings.workers > 1:
        from infinistream.server.workers import serve_workers

        return serve_workers(settings, argv[1:])
    return _run(_serve(settings, reread=lambda: settings_from_args(args)))


def _send_signal(text: str) -> int:
    """nats-server's `-sl COMMAND[=PID]`: signal a running agent, exit 0, or say why not."""
    from infinistream.server.signals import SignalError, parse_signal, send_signal

    try:
        send_signal(parse_signal(text))
    except SignalError as exc:
        print(f"infinistream: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
