"""The exceptions nimbus raises on purpose. Each names what went wrong and where."""

from __future__ import annotations


class NimbusError(Exception):
    """Base class of every error nimbus raises on purpose."""


class ConfigError(NimbusError):
    """A malformed config; the message names the key path (e.g. ``algo.lr``)."""

    nimbus_retryable = False


class CodecError(NimbusError):
    """Bytes that are not a valid nimbus frame (wrong magic, truncated, bad header)."""


class EnvContractError(NimbusError):
    """An environment broke its contract: NaN/Inf output, wrong shape or dtype, old gym API.

    Not retried: the same env and seed would fail the same way.
    """

    nimbus_retryable = False  # the runtime does not retry exceptions that set this to False


class FunctionFailed(NimbusError):
    """A function invocation failed on every attempt; carries the original traceback text, summarised first.

    ``kind``: how the runtime retried it (runtime/faults.py ``failure_kind``); ``retried``: the setting that
    bounded the retries (``max_retries=3``, ``retry_exceptions=0``)."""

    def __init__(self, *, function: str, invocation_id: str, attempts: int, error_type: str, traceback_text: str,
                 kind: str = "", retried: str = "") -> None:
        self.function = function
        self.invocation_id = invocation_id
        self.attempts = attempts
        self.error_type = error_type
        self.traceback_text = traceback_text
        self.kind = kind
        super().__init__(
            f"function {function!r} invocation {invocation_id} failed after {attempts} attempt(s): "
            f"{_summary(error_type=error_type, traceback_text=traceback_text, kind=kind, retried=retried)}"
            f"\n--- original traceback ---\n{traceback_text}"
        )


_WHY_STOPPED = {"application": "raised by the function's own code", "fatal": "not retryable",
                "infrastructure": "the platform failed"}


def _summary(*, error_type: str, traceback_text: str, kind: str, retried: str) -> str:
    """``ValueError: bad obs`` and, where the traceback shows them, the innermost frame and why retries stopped."""
    lines = [line for line in traceback_text.strip().splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    headline = last if last.startswith(error_type) else error_type
    frames = [line.strip() for line in lines if line.lstrip().startswith('File "')]
    where = f"\n  at {frames[-1]}" if frames else ""
    why = f"\n  {_WHY_STOPPED[kind]}; retries bounded by {retried}" if kind in _WHY_STOPPED and retried else ""
    return f"{headline}{where}{why}"


class CheckpointError(NimbusError):
    """A checkpoint that cannot be loaded: missing, corrupt, or of an incompatible format version."""


class StoreUnavailable(NimbusError):
    """The Store's server cannot be reached (or lost the run's keys) after bounded retries (P12).

    Not retried by the runtime: the store client already retried with back-off; the trainer stops
    cleanly with a final checkpoint from the driver's mirror.
    """

    nimbus_retryable = False


class StoreAuthError(StoreUnavailable):
    """The Store's server refused the credentials (wrong password, unknown user, missing ACL rights)."""


class StoreFull(StoreUnavailable):
    """The Store's server refused a write for lack of memory (``maxmemory`` + ``noeviction``) for longer
    than the back-pressure wait."""


class ClusterError(NimbusError):
    """Ray could not be started or joined, or the cluster cannot place a function."""

    nimbus_retryable = False
