"""
``tailkit serve``: an OpenAI- and Anthropic-compatible provider on loopback, with faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import signal

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tailkit.cli._common import fail, library_errors


if TYPE_CHECKING:
    from tailkit.serve import ServeConfig, Server


def _config(
    profile: Path | None,
    from_stats: Path | None,
    outcomes: Path | None,
    time_scale: float | None,
    seed: int | None,
) -> ServeConfig:
    from tailkit.serve import load_profile, profile_from_stats, serve_outcomes

    if sum(source is not None for source in (profile, from_stats, outcomes)) != 1:
        fail(
            "give one of --profile FILE.yaml, --from-stats STATS.json or --outcomes FILE.json "
            "(exactly one)"
        )
    if profile is not None:
        config = load_profile(profile)
    elif outcomes is not None:
        config = serve_outcomes(outcomes)
    else:
        assert from_stats is not None  # noqa: S101 - checked above
        config = profile_from_stats(from_stats)
    return dataclasses.replace(
        config,
        time_scale=config.time_scale if time_scale is None else time_scale,
        seed=config.seed if seed is None else seed,
    )


def _started(server: Server) -> dict[str, object]:
    """
    What ``serve --json`` prints once it listens: where, which routes, how fast, which seed.
    """
    config = server.config
    return {
        "url": server.url,
        "host": server.host,
        "port": server.port,
        "routes": list(config.models),
        "time_scale": config.time_scale,
        "seed": config.seed,
    }


async def _run(server: Server, *, as_json: bool) -> None:
    """
    Serve until Ctrl-C (KeyboardInterrupt), SIGTERM or SIGHUP; each stops it the same way.

    SIGTERM (``docker stop``, systemd) and SIGHUP (the terminal closed) would kill the
    process at once, losing the records of the requests in flight and the last line: here
    they end the wait, and `Server.stop` records what was in flight (``cancelled``) and
    closes the log before the last line is printed.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    stoppers = [getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    for signum in stoppers:
        with contextlib.suppress(NotImplementedError, RuntimeError):  # Windows: no such handler
            loop.add_signal_handler(signum, stop.set)
    try:
        await _listen(server, stop, as_json=as_json)
    finally:
        for signum in stoppers:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signum)


async def _listen(server: Server, stop: asyncio.Event, *, as_json: bool) -> None:
    async with server:
        config = server.config
        if as_json:
            typer.echo(json.dumps(_started(server)))
        else:
            typer.echo(
                f"tailkit serve: {len(config.models)} model(s) at {server.url} "
                f"(time scale {config.time_scale:g}, seed {config.seed}); Ctrl-C stops"
            )
            for name in config.models:
                typer.echo(f"  {name}")
        await stop.wait()


_CAUSES = ("refused", "idle", "flooded")


def _stopped(server: Server) -> str:
    """
    The last line: chat requests served, and connections closed early if any were.
    """
    line = f"stopped after {server.counts.total()} chat request(s)"
    early = server.closed_early
    if early.total():
        causes = {
            "refused": f"over --max-connections {server.max_connections}",
            "idle": "idle",
            "flooded": "flooded while answering",
        }
        line += "; connections closed early: " + ", ".join(
            f"{early[cause]} {words}" for cause, words in causes.items() if early[cause]
        )
    if server.accept_errors:
        line += f"; accepting failed {server.accept_errors} time(s) (open-file limit)"
    return line


def _stopped_json(server: Server) -> str:
    """
    The last line with ``--json``: the same counts, as one JSON object.
    """
    early = server.closed_early
    return json.dumps(
        {
            "stopped": True,
            "chat_requests": server.counts.total(),
            "closed_early": {cause: early[cause] for cause in _CAUSES},
            "accept_errors": server.accept_errors,
        }
    )


def serve(
    profile: Annotated[
        Path | None,
        typer.Option("--profile", metavar="FILE", help="The serve profile (YAML) to serve."),
    ] = None,
    from_stats: Annotated[
        Path | None,
        typer.Option(
            "--from-stats",
            metavar="FILE",
            help="Replay the measured quantiles of each route in `tailkit stats --by "
            "provider,model --bucket none --json` output.",
        ),
    ] = None,
    outcomes: Annotated[
        Path | None,
        typer.Option(
            "--outcomes",
            metavar="FILE",
            help="Replay measured outcome tables (JSON, as tailkit replay --out DIR writes).",
        ),
    ] = None,
    port: Annotated[
        int,
        typer.Option(
            "--port", metavar="PORT", help="TCP port on 127.0.0.1 (0: any free port).", min=0
        ),
    ] = 8000,
    time_scale: Annotated[
        float | None,
        typer.Option(
            "--time-scale",
            metavar="FACTOR",
            help="Real seconds per profile second (default: the profile's, or 1).",
        ),
    ] = None,
    log: Annotated[
        Path | None,
        typer.Option(
            "--log",
            metavar="FILE",
            help="Append each request's call record (JSON lines) to this file.",
        ),
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Seed (default: the profile's, or 0).")
    ] = None,
    idle_timeout: Annotated[
        float,
        typer.Option(
            "--idle-timeout",
            metavar="SECONDS",
            help="Real seconds a connection may wait for a whole next request, and a client "
            "may take to read what is written to it, before the connection is closed "
            "(inf: no limit).",
        ),
    ] = 30.0,
    max_connections: Annotated[
        int,
        typer.Option(
            "--max-connections",
            help="Connections served at once (fewer if the open-file limit, ulimit -n, "
            "leaves room for fewer; it says so at start); more are answered 503 and closed.",
            min=1,
        ),
    ] = 2048,
    max_body_mib: Annotated[
        int,
        typer.Option(
            "--max-body-mib",
            metavar="MIB",
            help="The largest request body, in MiB (larger: 413).",
            min=1,
        ),
    ] = 8,
    body_budget_mib: Annotated[
        int,
        typer.Option(
            "--body-budget-mib",
            metavar="MIB",
            help="Request bodies held at once by all connections together, in MiB; a body "
            "that does not fit what is left is answered 503 (larger than all of it: 413).",
            min=1,
        ),
    ] = 256,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            metavar="NAME",
            help="Also answer requests whose Host or Origin names NAME (repeat for more; "
            "'*': any). Loopback names and the bound address are always answered.",
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON line once listening (url, host, port, routes, time_scale, "
            "seed) and one when stopped, for scripts.",
        ),
    ] = False,
) -> None:
    """
    Serve OpenAI's chat completions and Anthropic's Messages API on loopback, with faults.

    GET /v1/models, POST /v1/chat/completions and POST /v1/messages (streamed or not) answer
    after a drawn TTFT and decode time, stall or fail as the profile says, honour the x-tailkit
    deadline headers, and log one call record per request. Runs until Ctrl-C, SIGTERM or
    SIGHUP (requests in flight are logged as cancelled). Its memory does not grow with the
    requests it serves: records go to --log only, and connections are bounded (--idle-timeout,
    --max-connections, --max-body-mib, --body-budget-mib).

    Example:

        tailkit serve --profile data_samples/serve_profile.yaml --time-scale 0.1

        tailkit serve --from-stats stats.json --port 8001 --log access.jsonl

        tailkit serve --outcomes demo/replay/outcomes.json --port 0 --json
    """
    from tailkit.serve import Limits, Server

    if not idle_timeout > 0:  # NaN too
        fail(f"--idle-timeout must be a number of seconds > 0 (inf: none), got {idle_timeout:g}")
    with library_errors("serve"):
        config = _config(profile, from_stats, outcomes, time_scale, seed)
        limits = Limits(
            idle_timeout_s=idle_timeout,
            max_connections=max_connections,
            max_body_bytes=max_body_mib * 1024 * 1024,
            body_budget_bytes=body_budget_mib * 1024 * 1024,
            keep_records=0,  # the command reads no record: they stream to --log
        )
    _raise_open_file_limit(max_connections)
    server = Server(
        config, port=port, access_log=log, limits=limits, allowed_hosts=allow_host or ()
    )
    try:
        with library_errors("serve"):
            asyncio.run(_run(server, as_json=as_json))
    except KeyboardInterrupt:
        pass  # Ctrl-C: stopped as SIGTERM and SIGHUP stop it
    except OSError as exc:
        fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}; choose another --port")
    typer.echo(_stopped_json(server) if as_json else _stopped(server))


def _raise_open_file_limit(connections: int) -> None:
    """
    Raise the soft open-file limit toward the hard one, for ``connections`` and headroom.

    The soft limit is often 1,024 while the hard one allows far more; what remains too low
    lowers the connection cap (`Server.start` warns of it).
    """
    try:
        import resource  # POSIX only
    except ImportError:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = (connections + 256) * 17 // 16
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if target > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
