"""ZeroPipeError: the one exception the client raises.

Every failure, whether the coordinator answered with an error or the client found it first (a job
file that does not parse, a wait that timed out), is a ZeroPipeError with the canonical gRPC status
code the coordinator uses for that kind of failure (proto/zpipe/v1/coordinator.proto lists them),
so a program handles both the same way.
"""
import re

import grpc

# "spec.parallel.pipeline: must be ..." or "spec.train.betas[1]: ...": the coordinator starts an
# INVALID_ARGUMENT message with the path of the field it refuses.
_FIELD_PATH = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])*(?:\.[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])*)*): ")


class ZeroPipeError(Exception):
    """A failed call.

    code:    a grpc.StatusCode (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, UNAUTHENTICATED, ...).
    message: what went wrong, as the coordinator (or the job-file reader) said it.
    field:   the path of the refused field in the request, e.g. "spec.parallel.pipeline" or
             "spec.schedule.knd" (job-file errors use the same "spec." paths); None when the
             error is not about one field.
    """

    def __init__(self, code, message, field=None):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.field = field

    @classmethod
    def from_rpc(cls, error, address=None):
        """The ZeroPipeError for a grpc.RpcError; `address` makes UNAVAILABLE say where."""
        code = error.code() if callable(getattr(error, "code", None)) else grpc.StatusCode.UNKNOWN
        message = (error.details() if callable(getattr(error, "details", None)) else None) or str(error)
        field = None
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            match = _FIELD_PATH.match(message)
            field = match.group(1) if match else None
        elif code == grpc.StatusCode.UNAVAILABLE and address is not None:
            message = f"cannot reach the coordinator at {address} ({message})"
        return cls(code, message, field)
