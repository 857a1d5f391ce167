"""The one exception type for bad input.

Library code raises :class:`EvrouteError` with a one-line message naming the problem;
the command line prints ``error: <message>`` on stderr and exits with code 2.
"""


class EvrouteError(ValueError):
    """Bad input or an impossible request, reported to the user as one line.

    A :class:`ValueError`, as scikit-learn's and BoTorch's input errors are: library callers may
    catch either."""


class NegativeCycleError(EvrouteError):
    """A cycle of negative total weight is reachable, so no shortest walk exists."""


class EvrouteWarning(UserWarning):
    """Something the user should know, printed by the command line as one line ``warning: ...``
    (only warnings of this kind reach the user; third-party libraries' internal ones do not)."""


class Interrupted(Exception):
    """The user stopped a long command (Ctrl-C, SIGTERM); the message says what is kept
    and how to resume. The command line prints it as one line and exits with 130."""
