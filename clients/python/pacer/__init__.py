"""pacer for Python: paces calls on keys shared with a fleet of pacer
processes (Go's and Python's) through pacer's Redis protocol
(docs/protocol.md). See clients/python/README.md."""

from .limiter import Limiter, Refused, Reservation, Unavailable, WaitTooLong
from .protocol import Bucket, Limit, PacerArgumentError, PacerError, Policy, Window

__all__ = [
    "Bucket", "Limit", "Limiter", "PacerArgumentError", "PacerError", "Policy", "Refused", "Reservation",
    "Unavailable", "WaitTooLong", "Window",
]
