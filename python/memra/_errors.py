"""Status codes and exceptions. A failed call raises the MemraError subclass
of its status, carrying the library's own message (memra_last_error or the
handle's last error) and the status text (memra_strerror)."""

from __future__ import annotations

import enum
from typing import Dict, Optional, Type

from . import _capi


class Status(enum.IntEnum):
    """memra_status_t (common.h)."""

    OK = 0
    E_INVALID = -1
    E_MISUSE = -2
    E_NOMEM = -3
    E_IO = -4
    E_FORMAT = -5
    E_UNSUPPORTED = -6
    E_NO_DEVICE = -7
    E_DEVICE = -8
    E_RANGE = -9
    E_FULL = -10
    E_AGAIN = -11
    E_NOT_FOUND = -12
    E_BUSY = -13
    E_TYPE = -14
    E_MISMATCH = -15
    E_INTERNAL = -16


def strerror(status: int) -> str:
    """Static English text of STATUS (memra_strerror)."""
    return (_capi.lib().memra_strerror(status) or b"").decode()


def status_name(status: int) -> str:
    """Symbolic name of STATUS without prefix, e.g. "E_FORMAT" (memra_status_name)."""
    return (_capi.lib().memra_status_name(status) or b"").decode()


def last_error() -> str:
    """Message of the calling thread's last failed call (memra_last_error)."""
    return (_capi.lib().memra_last_error() or b"").decode(errors="replace")


class MemraError(Exception):
    """A libmemra call failed.

    Attributes: ``status`` (a :class:`Status`, or the raw int for a code this
    package does not know), ``message`` (the library's message, e.g.
    "memra_model_load: cannot open x.gguf: No such file or directory") and
    ``func`` (the C function that failed)."""

    def __init__(self, status: int, message: str = "", func: str = "") -> None:
        try:
            self.status: int = Status(status)
        except ValueError:
            self.status = status
        self.message = message
        self.func = func
        try:
            name, text = status_name(status), strerror(status)
        except OSError:  # library not loadable: the status alone
            name, text = str(status), ""
        head = message or ("%s: %s" % (func, text) if func else text)
        super().__init__("%s [%s]" % (head, name))


class InvalidArgumentError(MemraError, ValueError):
    """MEMRA_E_INVALID."""


class MisuseError(MemraError):
    """MEMRA_E_MISUSE: wrong handle, wrong order or wrong state."""


class OutOfMemoryError(MemraError, MemoryError):
    """MEMRA_E_NOMEM."""


class InputOutputError(MemraError, OSError):
    """MEMRA_E_IO (also an OSError)."""


class FormatError(MemraError):
    """MEMRA_E_FORMAT: malformed or corrupt file."""


class UnsupportedError(MemraError):
    """MEMRA_E_UNSUPPORTED."""


class NoDeviceError(MemraError):
    """MEMRA_E_NO_DEVICE: no such device, or the backend is not built."""


class DeviceError(MemraError):
    """MEMRA_E_DEVICE."""


class RangeError(MemraError, IndexError):
    """MEMRA_E_RANGE: value out of range (a token id outside the vocabulary, ...)."""


class CacheFullError(MemraError):
    """MEMRA_E_FULL."""


class AgainError(MemraError):
    """MEMRA_E_AGAIN: not ready yet (also a load cancelled by its progress callback)."""


class NotFoundError(MemraError, LookupError):
    """MEMRA_E_NOT_FOUND."""


class BusyError(MemraError):
    """MEMRA_E_BUSY: the handle has work in flight, or dependants alive."""


class TypeMismatchError(MemraError, TypeError):
    """MEMRA_E_TYPE: a GGUF value has a different type."""


class MismatchError(MemraError):
    """MEMRA_E_MISMATCH: a check found a mismatch."""


class InternalError(MemraError):
    """MEMRA_E_INTERNAL."""


_CLASSES: Dict[int, Type[MemraError]] = {
    Status.E_INVALID: InvalidArgumentError,
    Status.E_MISUSE: MisuseError,
    Status.E_NOMEM: OutOfMemoryError,
    Status.E_IO: InputOutputError,
    Status.E_FORMAT: FormatError,
    Status.E_UNSUPPORTED: UnsupportedError,
    Status.E_NO_DEVICE: NoDeviceError,
    Status.E_DEVICE: DeviceError,
    Status.E_RANGE: RangeError,
    Status.E_FULL: CacheFullError,
    Status.E_AGAIN: AgainError,
    Status.E_NOT_FOUND: NotFoundError,
    Status.E_BUSY: BusyError,
    Status.E_TYPE: TypeMismatchError,
    Status.E_MISMATCH: MismatchError,
    Status.E_INTERNAL: InternalError,
}


def error(status: int, message: Optional[str] = None, func: str = "") -> MemraError:
    """The exception for STATUS; MESSAGE defaults to memra_last_error()."""
    if message is None:
        message = last_error()
    return _CLASSES.get(status, MemraError)(status, message, func)


def check(status: int, func: str, message: Optional[str] = None) -> None:
    """Raises the exception of STATUS unless it is MEMRA_OK. Call it right
    after the failing call, on the same thread: the message is read from the
    thread's memra_last_error() (which every failing call sets)."""
    if status != 0:
        raise error(status, message, func)


def misuse(func: str, what: str) -> MemraError:
    """A MisuseError raised by the package itself (closed handle, ...)."""
    return MisuseError(Status.E_MISUSE, "%s: %s" % (func, what), func)
