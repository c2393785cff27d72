"""The main job on embedded defaults (`prm-distill demo`, `make demo`): build a labelled data set
offline, distil the default backbone on it for a bounded budget, evaluate the exported checkpoint on
held-out data, run one recalibration round, serve it over HTTP and shape RL rewards with it.

The checkpoint is loaded once (`PRMEngine`) and that engine is passed to every later stage. What the
demo reads ships inside the package (`demo.yaml`, `trainer_prm.yaml`: `importlib.resources`), so it
runs the same from an installed wheel as from the repository.

- `run.py`            the stages in order, and what they print
- `labels.py`         relabelling the training split with the offline judges
- `recalibration.py`  one recalibration round on the test split
- `serving.py`        the checkpoint behind the HTTP server, scored by the async client
- `rl.py`             the PRM as a dense per-token reward in the runner, shaped advantages per mode
"""

from __future__ import annotations

from .run import demo_judge, run_demo

__all__ = ["demo_judge", "run_demo"]
