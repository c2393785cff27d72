"""Exit codes, the same for every `prm-distill` command (documented in the README), and the two
exceptions of the ground floor that choose one: `Unavailable` (4) and `Interrupted` (130).

A script or scheduler branches on them: 2 means fix the input, 3 means the model drifted (re-distil),
4 means a judge or scoring backend could not be reached (completed work is kept; rerun to resume),
130 means a SIGINT/SIGTERM stopped the job (completed work is kept; rerun to resume). The one table
from exception to code is `cli.exit_table()`, applied once in `cli.main`. Two codes are not chosen by
it: 141 when stdout was closed early (`| head`: quietly, as a Unix tool killed by SIGPIPE ends), and
1 with a traceback for an exception the table does not know, which is a bug.
"""

OK = 0
BAD_INPUT = 2  # a bad file, config, option or checkpoint; the message names it
DRIFT = 3  # recalibrate: a drift flag was raised, re-distillation advised
UNAVAILABLE = 4  # a judge, policy server, PRM server or model backend is unavailable (after retries)
INTERRUPTED = 130  # stopped by SIGINT/SIGTERM; completed work is kept
CLOSED_PIPE = 141  # stdout closed by its reader (128 + SIGPIPE, as the shell reports `yes | head`); no traceback


class Unavailable(RuntimeError):
    """A judge, policy server, scoring server or backend gave up after bounded retries (exit 4)."""


class Interrupted(RuntimeError):
    """A stop was requested (SIGTERM/SIGINT) and honoured: the work done so far is kept (exit 130)."""


__all__ = ["BAD_INPUT", "CLOSED_PIPE", "DRIFT", "INTERRUPTED", "OK", "UNAVAILABLE", "Interrupted", "Unavailable"]
