"""Exit codes, the same for every `prm-distill` command (documented in the README).

A script or scheduler branches on them: 2 means fix the input, 3 means the model drifted (re-distil),
4 means a judge or scoring backend could not be reached (completed work is kept; rerun to resume).
"""

OK = 0
BAD_INPUT = 2  # a bad file, config, option or checkpoint; the message names it
DRIFT = 3  # recalibrate: a drift flag was raised, re-distillation advised
UNAVAILABLE = 4  # a judge, policy server, PRM server or model backend is unavailable (after retries)
INTERRUPTED = 130  # stopped by SIGINT/SIGTERM; completed work is kept

__all__ = ["BAD_INPUT", "DRIFT", "INTERRUPTED", "OK", "UNAVAILABLE"]
