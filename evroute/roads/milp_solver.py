"""The exact optimum's solvers, stopped by Ctrl-C within a fraction of a second
(:mod:`evroute.roads.optimum`): HiGHS looks for a user interrupt only between iterations, nodes and
heuristics, at times seconds apart, and Python's signal handlers wait for it to return.

- the warm LPs run in this process, in one :class:`highspy.Highs` each (:func:`highs_class`),
  through :func:`run_highs`: Ctrl-C stops them in HiGHS's interrupt callbacks;
- the MILP runs in a child process that Ctrl-C kills (:class:`MilpSolver`), or here
  (:func:`milp_here`) where Ctrl-C stops nothing (:func:`ctrl_c_stops_here`);
- :func:`quiet_stdout` keeps what HiGHS prints out of evroute's own output.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
import warnings

from scipy.optimize import milp

__all__ = ["highs_class", "quiet_stdout", "STOP_SIGNALS", "ctrl_c_stops_here", "run_highs", "milp_here", "MilpSolver"]


def highs_class():
    """HiGHS's Python class and model-status enum (the public ``highspy`` package).

    Used to re-solve the LP relaxation warm-started after adding cuts, which is 5–20×
    faster than a cold :func:`scipy.optimize.milp` call per round.
    """
    import highspy

    return highspy.Highs, highspy.HighsModelStatus


@contextlib.contextmanager
def quiet_stdout():
    """The process's standard output (file descriptor 1) sent to /dev/null for the duration: a
    library's C code that prints there (HiGHS's banner, before any option can be set) would
    otherwise end up in evroute's output (``--json``, ``--geojson -``)."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no file descriptor 1 (an embedding host): nothing to protect
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


#: The signals whose Python handlers stop a command (the CLI turns SIGTERM into KeyboardInterrupt).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def ctrl_c_stops_here() -> bool:
    """True in the main thread while SIGINT has a Python handler (KeyboardInterrupt by default):
    there Ctrl-C must stop a solver at once. Elsewhere (another thread, where no handler can be set;
    a pool worker of ``evroute compare``, which ignores SIGINT) the solvers run undisturbed."""
    return threading.current_thread() is threading.main_thread() and callable(signal.getsignal(signal.SIGINT))


def run_highs(h) -> None:
    """``h.run()`` on a :class:`highspy.Highs`, stopped within milliseconds by Ctrl-C.

    Python runs a signal's handler only between two bytecodes of the main thread, so while HiGHS
    runs there Ctrl-C waits for it. Here, while it runs, the Python handlers of SIGINT and SIGTERM
    only note the signal; Python runs that note in HiGHS's interrupt callbacks (between simplex and
    IPM iterations and MIP nodes), which then stop the solver; once it has returned the noted
    signal's own handler runs: Ctrl-C's raises KeyboardInterrupt (one that returns lets the solve
    go on). A raising handler must not run inside a callback: HiGHS would swallow its exception and
    report a solver error. The handlers and callbacks are put back whatever happens; where Ctrl-C
    does not stop anything (:func:`ctrl_c_stops_here`) it is ``h.run()``.
    """
    if not ctrl_c_stops_here():
        h.run()
        return
    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    handlers = {sig: handler for sig, handler in handlers.items() if callable(handler)}
    caught: list[int] = []

    def note(signum, frame):
        caught.append(signum)

    def check(event):
        if event.data_in is not None:  # (HiGHS keeps the flag from an earlier interrupted run)
            event.data_in.user_interrupt = bool(caught)

    events = (h.cbSimplexInterrupt, h.cbIpmInterrupt, h.cbMipInterrupt)
    while True:
        try:
            _set_handlers(dict.fromkeys(handlers, note))
            for event in events:
                event.subscribe(check)
            h.run()
        finally:
            for event in events:
                event.unsubscribe(check)
            _set_handlers(handlers)
        if not caught:
            return
        signum = caught[0]
        caught.clear()
        handlers[signum](signum, None)


def _set_handlers(handlers: dict) -> None:
    """``signal.signal(sig, handler)`` for each item, every one of them even where a handler set
    first runs in between and raises (Ctrl-C's KeyboardInterrupt): that is raised at the end."""
    raised = None
    done = False
    while not done:
        try:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            done = True
        except BaseException as exc:
            raised = exc
    if raised is not None:
        raise raised


def milp_here(**kwargs):
    """:func:`scipy.optimize.milp` in this process."""
    with warnings.catch_warnings():
        # scipy hands options it does not know (mip_abs_gap) to HiGHS verbatim, and warns
        warnings.simplefilter("ignore", RuntimeWarning)
        return milp(**kwargs)


# the child process of MilpSolver: sys.path, then requests (milp's keyword arguments) on standard
# input, each answered by milp's result (or its exception) on the original standard output; it
# ends at the end of its input (the parent closed the pipe or died)
_MILP_PROCESS = r"""
import os, pickle, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it kills this process
try:
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing a library prints may enter the answers
    requests = sys.stdin.buffer
    sys.path[:] = pickle.load(requests)
    import warnings
    from scipy.optimize import milp
    while True:
        kwargs = pickle.load(requests)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                out = milp(**kwargs)
            except Exception as exc:
                out = exc
        pickle.dump(out, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()
except (EOFError, OSError):
    pass
"""


class MilpSolver:
    """:func:`scipy.optimize.milp` in a child process that Ctrl-C kills at once.

    HiGHS checks for a user interrupt only between nodes and heuristics, which can be seconds apart
    (5.4 s in the root's sub-MIP heuristics on synthetic:A; highspy 1.16's parallel search checks
    every ~100 nodes, 2–3 s), so a MILP in this process cannot promise to stop within 2 s of
    Ctrl-C. The child makes the very same call (the same SciPy and HiGHS: the same results, the
    same time limit); Ctrl-C (or SIGTERM) interrupts the wait for its answer and kills it. It
    starts at the first MILP (~0.6 s, not taken from the MILP's time), serves every MILP round
    of one :func:`exact_optimum` call and ends with it (:meth:`close`). Where Ctrl-C stops nothing
    (:func:`ctrl_c_stops_here`), or the child cannot start or dies, the MILP runs in this process.
    """

    def __init__(self):
        self._proc = None
        self._here = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __call__(self, **kwargs):
        if self._proc is None and not self._here:
            self._start()
        if self._proc is None:
            return milp_here(**kwargs)
        try:
            pickle.dump(kwargs, self._proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self._proc.stdin.flush()
            out = pickle.load(self._proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):  # the child died: solve here
            self.close()
            self._here = True
            return milp_here(**kwargs)
        except BaseException:  # Ctrl-C: stop the solver now
            self.close()
            raise
        if isinstance(out, BaseException):
            raise out
        return out

    def _start(self) -> None:
        self._here = not (ctrl_c_stops_here() and sys.executable)
        if self._here:
            return
        try:
            self._proc = subprocess.Popen([sys.executable, "-I", "-c", _MILP_PROCESS],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            pickle.dump(list(sys.path), self._proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        except OSError:
            self.close()
            self._here = True
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Kill the child (idle or not) and wait for it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()
