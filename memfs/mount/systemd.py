"""The one piece of the systemd protocol memfs speaks: `sd_notify` readiness.

Under `Type=notify` the service manager passes NOTIFY_SOCKET; a foreground mount sends
READY=1 once it is live, so units ordered after it start against a live mount (no
polling loop in ExecStartPost). Without NOTIFY_SOCKET nothing is sent.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(state: str) -> bool:
    """Send `state` (e.g. "READY=1\\nSTATUS=…") to the service manager; True if sent."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(address)
            s.sendall(state.encode())
    except OSError as e:
        log.warning(
            "cannot tell the service manager the mount is ready socket=%s error=%s",
            os.environ.get("NOTIFY_SOCKET"),
            e.strerror or e,
        )
        return False
    return True
