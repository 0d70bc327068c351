# SPDX-License-Identifier: MIT
"""coord.errors - coord's error codes as exceptions with TensorFlow's names.

Every coord call returns 0 or a negative code (include/coord/error.h): coord's own
codes (their values are the extension's constants), or a negative errno
with an optional detail record (message, worker, closure).  The extension raises
them through make_error(), which picks the class from the code:

    COORD_ECANCELLED                 CancelledError
    COORD_EUNAVAILABLE               UnavailableError
    COORD_EINPUT                     InputError (original_exception: the cause)
    COORD_ENOFN, -ENOENT             NotFoundError
    COORD_ESTALE                     FailedPreconditionError (a variable handle from
                                     before its ps task restarted: look it up again)
    COORD_ETIMEDOUT (-ETIMEDOUT)     DeadlineExceededError
    COORD_EINVAL (-EINVAL)           InvalidArgumentError
    COORD_ENOMEM, -ENOSPC, -EFBIG    ResourceExhaustedError
    -EEXIST                          AlreadyExistsError
    -ERANGE                          OutOfRangeError
    -EBADMSG                         DataLossError
    -EACCES, -EPERM                  PermissionDeniedError
    anything else (a function's own) UnknownError

Each carries .code (coord's negative code), .worker and .closure (None when
the failure had none), .message, and TF's numeric .error_code.
"""
import errno

from . import _coord

__all__ = ["Error", "OpError", "CancelledError", "UnknownError", "InvalidArgumentError",
           "DeadlineExceededError", "NotFoundError", "AlreadyExistsError",
           "PermissionDeniedError", "ResourceExhaustedError", "FailedPreconditionError",
           "AbortedError", "OutOfRangeError", "UnimplementedError", "InternalError",
           "UnavailableError", "DataLossError", "InputError", "make_error"]

_NO_CLOSURE = (1 << 64) - 1


class Error(Exception):
    """A coord failure: .code, .cause, .worker, .closure, .message."""
    error_code = 2

    def __init__(self, message, code=0, cause=0, worker=None, closure=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.cause = cause
        self.worker = worker
        self.closure = closure

    def __reduce__(self):
        return (type(self), (self.message, self.code, self.cause, self.worker, self.closure))


class OpError(Error):
    """TensorFlow's tf.errors.OpError: the base of the named errors."""


def _op(name, tf_code, doc):
    return type(name, (OpError,), {"error_code": tf_code, "__doc__": doc})


CancelledError = _op("CancelledError", 1, "the closure was cancelled (S3) or aborted")
UnknownError = _op("UnknownError", 2, "a function's own error code")
InvalidArgumentError = _op("InvalidArgumentError", 3, "bad argument or malformed input")
DeadlineExceededError = _op("DeadlineExceededError", 4, "a wait ran out of time")
NotFoundError = _op("NotFoundError", 5, "unknown function, variable or checkpoint")
AlreadyExistsError = _op("AlreadyExistsError", 6, "a variable exists with another shape")
PermissionDeniedError = _op("PermissionDeniedError", 7, "a path outside a ps task's root")
ResourceExhaustedError = _op("ResourceExhaustedError", 8, "out of memory or room")
FailedPreconditionError = _op("FailedPreconditionError", 9, "not in a state to do that")
AbortedError = _op("AbortedError", 10, "aborted")
OutOfRangeError = _op("OutOfRangeError", 11, "an index out of range")
UnimplementedError = _op("UnimplementedError", 12, "not implemented")
InternalError = _op("InternalError", 13, "internal error")
UnavailableError = _op("UnavailableError", 14, "a ps task or every worker is gone (S10, S11)")
DataLossError = _op("DataLossError", 15, "a corrupt checkpoint")
for _c in (CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError,
           NotFoundError, AlreadyExistsError, PermissionDeniedError, ResourceExhaustedError,
           FailedPreconditionError, AbortedError, OutOfRangeError, UnimplementedError,
           InternalError, UnavailableError, DataLossError):
    _c.__module__ = __name__


class InputError(Error):
    """An input of the closure failed (a per-worker resource could not be made,
    S9), as TensorFlow's coordinator InputError: .original_exception is the
    cause's exception."""

    def __init__(self, message, code=0, cause=0, worker=None, closure=None):
        super().__init__(message, code, cause, worker, closure)
        self.original_exception = make_error(cause, 0, worker, closure, message) if cause \
            else None


_BY_ERRNO = {
    -_coord.ECANCELLED: CancelledError,
    -_coord.EUNAVAILABLE: UnavailableError,
    -_coord.EINPUT: InputError,
    -_coord.ENOFN: NotFoundError,
    -_coord.ESTALE: FailedPreconditionError,
    errno.ENOENT: NotFoundError,
    errno.ETIMEDOUT: DeadlineExceededError,
    errno.EINVAL: InvalidArgumentError,
    errno.ENAMETOOLONG: InvalidArgumentError,
    errno.ENOMEM: ResourceExhaustedError,
    errno.ENOSPC: ResourceExhaustedError,
    errno.EFBIG: ResourceExhaustedError,
    errno.EEXIST: AlreadyExistsError,
    errno.ERANGE: OutOfRangeError,
    errno.EBADMSG: DataLossError,
    errno.EACCES: PermissionDeniedError,
    errno.EPERM: PermissionDeniedError,
    errno.ENOSYS: UnimplementedError,
    errno.EOPNOTSUPP: UnimplementedError,
}


def make_error(code, cause=0, worker=-1, closure=_NO_CLOSURE, message=""):
    """The exception for coord code @code (what the extension raises)."""
    cls = _BY_ERRNO.get(-code, UnknownError)
    return cls(message, code, cause,
               None if worker is None or worker < 0 else worker,
               None if closure is None or closure == _NO_CLOSURE else closure)
