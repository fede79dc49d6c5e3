"""Debug logging: the ``toolchain`` logger (``toolchain.http``: each HTTP try; ``toolchain.proc``: each process
started and how it ended), shown on stderr only under ``TOOLCHAIN_DEBUG=1``.

The library only logs at DEBUG and installs nothing; :func:`configure` (called by the CLI for every command)
adds one stderr handler when debugging and removes it otherwise, so without ``TOOLCHAIN_DEBUG=1`` nothing is
printed (Python's last-resort handler shows warnings and above only). A program that uses the library
configures the ``toolchain`` logger itself. No header, token or password is ever logged (URLs lose their
credentials and secret query values, process arguments their secret values: ``toolchain.redact``, which
the stderr handler applies to every record as written).
"""

from __future__ import annotations

import logging
import sys

from toolchain import redact, settings

LOGGER = "toolchain"


class _Stderr(logging.Handler):
    """Writes to whatever ``sys.stderr`` is when the record comes (a test runner swaps it per command)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(redact.text(self.format(record)) + "\n")
        except Exception:
            self.handleError(record)


def configure(debug: bool | None = None) -> bool:
    """Show the ``toolchain`` logger's DEBUG records on stderr when ``debug`` (default: ``TOOLCHAIN_DEBUG=1``);
    otherwise take that handler away again. Returns whether debugging is on."""
    on = settings.debug() if debug is None else debug
    logger = logging.getLogger(LOGGER)
    ours = [h for h in logger.handlers if isinstance(h, _Stderr)]
    if on and not ours:
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("debug %(name)s: %(message)s"))
        logger.addHandler(handler)
    if not on:
        for h in ours:
            logger.removeHandler(h)
    logger.setLevel(logging.DEBUG if on else logging.NOTSET)
    return on


def redact_argv(cmd: list[str]) -> list[str]:
    """``cmd`` as it may be logged (``toolchain.redact.argv``): the value of a ``--password``/``--token``/... flag
    (either form, ``--flag V`` or ``--flag=V``) and any credentials in an argument replaced by ``***``."""
    return redact.argv(cmd)
