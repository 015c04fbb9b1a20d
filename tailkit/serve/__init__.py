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
"""

from tailkit.serve._limits import Limits as Limits
from tailkit.serve._outcomes import INVALID_MARK as INVALID_MARK
from tailkit.serve._outcomes import Outcomes as Outcomes
from tailkit.serve._outcomes import dump_outcomes as dump_outcomes
from tailkit.serve._outcomes import load_outcomes as load_outcomes
from tailkit.serve._profile import Faults as Faults
from tailkit.serve._profile import ModelProfile as ModelProfile
from tailkit.serve._profile import ServeConfig as ServeConfig
from tailkit.serve._profile import load_profile as load_profile
from tailkit.serve._replay import profile_from_stats as profile_from_stats
from tailkit.serve._replay import serve_outcomes as serve_outcomes
from tailkit.serve._server import Server as Server


__all__ = [
    "INVALID_MARK",
    "Faults",
    "Limits",
    "ModelProfile",
    "Outcomes",
    "ServeConfig",
    "Server",
    "dump_outcomes",
    "load_outcomes",
    "load_profile",
    "profile_from_stats",
    "serve_outcomes",
]
