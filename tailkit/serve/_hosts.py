"""
Which ``Host`` and ``Origin`` the server answers: a guard against DNS rebinding.

A web page a developer opens can make their browser send requests to ``127.0.0.1`` by giving
its own domain name that address (DNS rebinding). The browser then sends that domain as the
``Host`` (and as the ``Origin`` of a script's request), never a loopback name. So the server
answers only names it knows: loopback names (``localhost``, ``*.localhost``, a loopback
address), the address or name it listens on, the address a connection came in on, and what
the user allows (``allowed_hosts``; ``"*"``: any). Anything else answers 403.
"""

from __future__ import annotations

import ipaddress
import re

from collections.abc import Iterable

from tailkit.serve._framing import HttpError


__all__ = ["HostCheck", "is_loopback"]

_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]+)(?::[0-9]*)?")
_ORIGIN = re.compile(r"(?:http|https)://([^/?#@]+)")


def _name(text: str) -> str:
    """
    A host as compared: lower case, no brackets around an IPv6 address, no trailing dot.
    """
    return text.strip().lower().removeprefix("[").removesuffix("]").rstrip(".")


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """
    Whether listening on ``host`` reaches this machine only (``""`` is every interface).
    """
    name = _name(host)
    if name == "localhost" or name.endswith(".localhost"):
        return True
    address = _address(name)
    return address is not None and address.is_loopback


class HostCheck:
    """
    Refuse a request whose ``Host`` or ``Origin`` names a host the server does not answer.

    Args:
        bound: The host the server listens on.
        allowed: More names (or addresses) to answer; ``"*"`` answers any.
    """

    def __init__(self, bound: str, allowed: Iterable[str] = ()) -> None:
        names = {_name(name) for name in allowed}
        self.any = "*" in names
        self.names = names | {_name(bound)} - {"", "0.0.0.0", "::"}  # noqa: S104 - not a bind

    def allows(self, name: str, local: str | None = None) -> bool:
        """
        Whether ``name`` (a Host's or Origin's host, without port) is answered.

        Args:
            name: The host.
            local: The address the connection came in on (``None``: unknown).
        """
        name = _name(name)
        if self.any or name in self.names or is_loopback(name):
            return True
        address = _address(name)
        return address is not None and local is not None and address == _address(_name(local))

    def check(self, headers: dict[str, str], local: str | None = None) -> None:
        """
        Refuse the request if its ``Host`` or ``Origin`` is not answered.

        Args:
            headers: The request's headers (names lower-cased).
            local: The address the connection came in on (``None``: unknown).

        Raises:
            HttpError: 400 for a malformed Host, 403 for one (or an Origin) not answered.
        """
        host = headers.get("host")
        if host is not None:
            match = _HOST.fullmatch(host)
            if match is None:
                raise HttpError(400, f"malformed Host {host[:80]!r}")
            if not self.allows(match.group(1), local):
                raise _refused("Host", host)  # noqa: EM101 - a field name
        origin = headers.get("origin")
        if origin is not None:
            match = _ORIGIN.fullmatch(origin)
            hostport = None if match is None else _HOST.fullmatch(match.group(1))
            if hostport is None or not self.allows(hostport.group(1), local):
                raise _refused("Origin", origin)  # noqa: EM101 - a field name


def _refused(field: str, value: str) -> HttpError:
    message = (
        f"{field} {value[:80]!r} is not a name this server answers (loopback names and its "
        "own address); start it with --allow-host NAME (Server(allowed_hosts=...)) to allow more"
    )
    return HttpError(403, message, error_type="host_not_allowed")
