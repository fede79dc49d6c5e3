"""A ZeroMQ XSUB/XPUB forwarder bound on 127.0.0.1, for Dynamo's event plane in broker mode.

Run by Dynamo's own interpreter (it needs pyzmq, which ai-dynamo installs): ``python zmq_broker.py XSUB XPUB``.
In 1.6.1 every direct-mode event publisher binds ``tcp://0.0.0.0:0`` whatever the host settings say
(lib/runtime/src/transports/event_plane); with ``DYN_ZMQ_BROKER_URL="xsub=tcp://127.0.0.1:A , xpub=tcp://127.0.0.1:B"``
publishers and subscribers connect to this forwarder instead, and nothing but it listens (docs/dynamo.md).
Dynamo's wheel ships no broker, hence this one.
"""

from __future__ import annotations

import sys

import zmq


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(a.isdigit() for a in argv):
        sys.stderr.write("usage: python zmq_broker.py XSUB_PORT XPUB_PORT\n")
        return 2
    ctx = zmq.Context()
    xsub = ctx.socket(zmq.XSUB)
    xsub.bind(f"tcp://127.0.0.1:{argv[0]}")
    xpub = ctx.socket(zmq.XPUB)
    xpub.bind(f"tcp://127.0.0.1:{argv[1]}")
    print(f"zmq broker: xsub tcp://127.0.0.1:{argv[0]} xpub tcp://127.0.0.1:{argv[1]}", flush=True)
    zmq.proxy(xsub, xpub)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
