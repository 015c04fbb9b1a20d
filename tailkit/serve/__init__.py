"""
``tailkit serve``: an OpenAI- and Anthropic-compatible provider on loopback, for tests and demos.

It answers like a real provider with a latency tail: a lognormal TTFT and decode speed, a
share of transient stalls, and faults (hangs, stalls mid-stream, 5xx, resets, garbage, bodies
without choices, cut streams, a tokens-per-minute limit), all drawn from one seeded generator
and scaled in time. It honours the deadline a request carries (``x-tailkit-deadline``,
``x-tailkit-remaining-s``), stops work when the client leaves, and writes an access log in the
call-record format. Standard library only (PyYAML to read profile files).

Example::

    config = ServeConfig(models={"m": ModelProfile(ttft_median_s=2.0)}, time_scale=0.01)
    async with Server(config) as server:
        ...  # point an OpenAI client at server.url, an Anthropic one at server.root_url
    print(server.records)

It answers OpenAI's ``/v1/chat/completions`` and Anthropic's ``/v1/messages`` (and its stream
events) with the same draws and faults, each in its API's shapes. Whatever clients send, it
answers and logs every chat request, and its memory stays bounded (`Limits`: the records it
keeps, idle connections, concurrent connections, body size).

A configuration comes from one of three sources: `ServeConfig` built in code (or `load_profile`
from a YAML profile), `profile_from_stats` (the quantiles of measured calls), or
`serve_outcomes` (the measured calls a replay wrote). The tables a replay serves are building
blocks in `tailkit.serve.lowlevel`. The deadline it honours is `tailkit.deadline`'s; its access
log is written by `tailkit.ledger`, so it reads back like the executor's ledger.
"""

from tailkit.serve._limits import Limits as Limits
from tailkit.serve._profile import Faults as Faults
from tailkit.serve._profile import ModelProfile as ModelProfile
from tailkit.serve._profile import ServeConfig as ServeConfig
from tailkit.serve._profile import load_profile as load_profile
from tailkit.serve._replay import profile_from_stats as profile_from_stats
from tailkit.serve._replay import serve_outcomes as serve_outcomes
from tailkit.serve._server import Server as Server


__all__ = [
    "Faults",
    "Limits",
    "ModelProfile",
    "ServeConfig",
    "Server",
    "load_profile",
    "profile_from_stats",
    "serve_outcomes",
]
