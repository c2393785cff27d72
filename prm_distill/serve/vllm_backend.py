"""vLLM as the PRM backend: the exported checkpoint under vLLM's pooling runner with the STEP pooler.

The checkpoint is a plain `*ForTokenClassification` folder, so vLLM loads it without our code; the
STEP pooler (`step_tag_id` from the sidecar) returns softmax probabilities at every step-tag token
of a prompt. Both forms below send token ids made by our `StepEncoder`, never text, so vLLM scores
exactly the ids training and `PRMEngine` see. A window that repeats earlier steps as context has
their tags too; the rows of the window's own steps are picked by position.

- `VLLMOfflineEngine(model_dir).score(items)`: `LLM(...).encode` in this process (needs the `vllm`
  extra); synchronous like `PRMEngine`, so it can also sit behind `ScoreBatcher`.
- `VLLMPoolingClient(url, model_dir)`: async client of `vllm serve` (`POST /pooling`), the scorer's
  backend seam; it needs httpx and the tokenizer, not vLLM.
- `serve_command(model_dir)`: the exact `vllm serve` command line for an exported checkpoint.

Both are `protocol` scorers. vLLM serves raw scores and knows nothing of the sidecar's calibration,
so `calibration()` re-reads the checkpoint's sidecar when it changes (`CalibrationWatch`): a
calibration adopted by `recalibrate --adopt` reaches a vLLM-backed scorer as it reaches the engine.

From the command line, in the environment that has vLLM (see scripts/setup_vllm.sh):

    python -m prm_distill.serve.vllm_backend --model DIR --print-serve-command [--port 8001]
    echo '{"items": [{"question": "...", "steps": ["..."]}]}' | python -m prm_distill.serve.vllm_backend --model DIR --output scores.json
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..atomic import dumps
from ..checkpoint import CalibrationWatch, Sidecar, read_sidecar
from ..encoding import EncodedTrajectory, Window, encoder_for
from ..generate.engine_kwargs import vllm_engine_kwargs
from ..protocol import Item
from ..verify import apply_rule
from .client import ClientConfig, PRMServerError, request_json

INSTALL_HINT = "vLLM is not installed here: run scripts/setup_vllm.sh (a separate venv) or pip install 'prm_distill[vllm]'"


def pooler_config(sidecar: Sidecar) -> dict[str, Any]:
    return {"pooling_type": "STEP", "step_tag_id": sidecar.step_tag_id}


def serve_command(model_dir: str | Path, *, host: str = "127.0.0.1", port: int = 8000, dtype: str = "float32") -> list[str]:
    """`vllm serve` for an exported checkpoint: pooling runner, STEP pooler, our window length.

    Eager mode: a PRM only prefills, where CUDA graphs gain little and cost start-up time.
    """
    sidecar = read_sidecar(model_dir)
    return [
        "vllm", "serve", str(model_dir), "--runner", "pooling", "--dtype", dtype,
        "--max-model-len", str(sidecar.max_length), "--enforce-eager",
        "--served-model-name", Path(model_dir).name,
        "--pooler-config", json.dumps(pooler_config(sidecar), separators=(",", ":")),
        "--host", host, "--port", str(port),
    ]


def engine_options(sidecar: Sidecar, dtype: str | None = None, *, gpu: bool | None = None, **llm_kwargs: Any) -> dict[str, Any]:
    """`vllm.LLM` arguments of the pooling engine: the host's (`generate.vllm_engine_kwargs`: dtype
    auto on GPU, float32 and the in-process engine core on CPU), then the pooling runner, the STEP
    pooler, our window length and eager mode (a PRM only prefills), then `dtype` and `llm_kwargs`."""
    options = {"runner": "pooling", "max_model_len": sidecar.max_length, "enforce_eager": True,
               "pooler_config": pooler_config(sidecar), **({"dtype": dtype} if dtype else {}), **llm_kwargs}
    return vllm_engine_kwargs(options, gpu=gpu)


class _StepInputs:
    """Our encoding of (question, steps) into vLLM prompts, and the pooler's rows back into step scores."""

    def __init__(self, model_dir: str | Path) -> None:
        from transformers import AutoTokenizer

        self.sidecar = read_sidecar(model_dir)
        self.model_id = Path(model_dir).name
        self.encoder = encoder_for(AutoTokenizer.from_pretrained(model_dir), self.sidecar)
        self.calibration = CalibrationWatch(model_dir, self.sidecar.calibration)

    def encode(self, items: Sequence[Item]) -> tuple[list[EncodedTrajectory], list[list[int]]]:
        """Encoded trajectories and the token ids of all their windows, in order."""
        encoded = [self.encoder.encode(question, list(steps)) for question, steps in items]
        return encoded, [window.input_ids for enc in encoded for window in enc.windows]

    def scores(self, encoded: Sequence[EncodedTrajectory], rows: Sequence[Sequence[Sequence[float]]]) -> list[list[float]]:
        """Per-step P(good) from the pooler's `[n_tags, 2]` rows of every window."""
        if len(rows) != sum(len(enc.windows) for enc in encoded):
            raise RuntimeError(f"vLLM returned {len(rows)} outputs for {sum(len(e.windows) for e in encoded)} prompts")
        out, k = [], 0
        for enc in encoded:
            scores = [math.nan] * enc.n_steps
            for window in enc.windows:
                for step, p in zip(window.step_indices, self._own_rows(window, rows[k]), strict=True):
                    scores[step] = p
                k += 1
            out.append(scores)
        return out

    def _own_rows(self, window: Window, rows: Sequence[Sequence[float]]) -> list[float]:
        tags = [pos for pos, token in enumerate(window.input_ids) if token == self.sidecar.step_tag_id]
        if len(rows) != len(tags):
            raise RuntimeError(f"vLLM's STEP pooler returned {len(rows)} rows for {len(tags)} step tags")
        row_at = {pos: row for row, pos in enumerate(tags)}
        return [float(rows[row_at[pos]][1]) for pos in window.tag_positions]


class VLLMOfflineEngine:
    """`score(items)` -> per-step P(good) through an in-process `vllm.LLM` pooling runner.

    Construct it under `if __name__ == "__main__":` in scripts: vLLM's engine may re-import the
    main module in new processes.
    """

    def __init__(self, model_dir: str | Path, *, dtype: str | None = None, **llm_kwargs: Any) -> None:
        """`dtype` None = the host's (`vllm_engine_kwargs`: auto on GPU, float32 on CPU); `llm_kwargs` go last."""
        try:
            from vllm import LLM
        except ImportError as e:
            raise ImportError(INSTALL_HINT) from e
        self.inputs = _StepInputs(model_dir)
        self.sidecar, self.model_id = self.inputs.sidecar, self.inputs.model_id
        self.llm = LLM(model=str(model_dir), **engine_options(self.sidecar, dtype, **llm_kwargs))

    def calibration(self) -> dict[str, Any] | None:
        """The checkpoint's calibration now (re-read when its sidecar changes); scores stay raw."""
        return self.inputs.calibration.current()

    def score(self, items: Sequence[Item]) -> list[list[float]]:
        encoded, prompts = self.inputs.encode(items)
        outputs = self.llm.encode(
            [{"prompt_token_ids": ids} for ids in prompts], pooling_task="token_classify", use_tqdm=False
        )
        raw = self.inputs.scores(encoded, [output.outputs.data.tolist() for output in outputs])
        return apply_rule(self.sidecar.verifier, items, raw)  # vLLM knows nothing of the verifier rule: applied here, as the engine does


class VLLMPoolingClient:
    """Async client of `vllm serve ... --runner pooling` (see `serve_command`); the scorer's backend seam.

    `model_dir` is the served checkpoint (for its tokenizer and sidecar); `served_model_name` is
    sent as `model` when given (vLLM picks its only model otherwise).
    """

    def __init__(self, base_url: str, model_dir: str | Path, *, served_model_name: str | None = None,
                 api_key: str | None = None, config: ClientConfig | None = None) -> None:
        self.inputs = _StepInputs(model_dir)
        self.sidecar, self.model_id = self.inputs.sidecar, served_model_name or self.inputs.model_id
        self.served_model_name = served_model_name
        self.config = config or ClientConfig()
        self._http = self.config.http_client(base_url, {"Authorization": f"Bearer {api_key}"} if api_key else None)

    def calibration(self) -> dict[str, Any] | None:
        """The checkpoint's calibration now (re-read when its sidecar changes); scores stay raw."""
        return self.inputs.calibration.current()

    async def score(self, question: str, steps: Sequence[str]) -> list[float]:
        [scores] = await self.score_batch([(question, steps)])
        return scores

    async def score_batch(self, items: Sequence[Item]) -> list[list[float]]:
        """All windows of all items in one /pooling request."""
        encoded, prompts = self.inputs.encode(items)
        payload: dict[str, Any] = {"input": prompts, "task": "token_classify"}
        if self.served_model_name:
            payload["model"] = self.served_model_name
        body = await request_json(self._http, self.config, "POST", "/pooling", payload)
        try:
            rows = [entry["data"] for entry in sorted(body["data"], key=lambda entry: entry["index"])]
        except (KeyError, TypeError) as e:
            raise PRMServerError(f"malformed /pooling answer ({e}): {str(body)[:200]}") from None
        return apply_rule(self.sidecar.verifier, items, self.inputs.scores(encoded, rows))

    async def aclose(self) -> None:
        await self._http.aclose()


def main(argv: list[str] | None = None) -> int:
    """Score `{"items": [...]}` from stdin with vLLM offline; print scores and the scoring time as JSON."""
    parser = argparse.ArgumentParser(prog="python -m prm_distill.serve.vllm_backend", description=main.__doc__)
    parser.add_argument("--model", required=True, help="exported checkpoint folder")
    parser.add_argument("--dtype", default=None, help="vLLM dtype (default: the host's: auto on GPU, float32 on CPU)")
    parser.add_argument("--output", default="-", help="where to write the JSON answer (vLLM logs to stdout too)")
    parser.add_argument("--repeat", type=int, default=1, help="score the items this many times (timing: the best run, wall and process CPU time)")
    parser.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=False,
                        help="vLLM's prefix cache (off: a repeated run would otherwise reuse the first run's work)")
    parser.add_argument("--print-serve-command", action="store_true", help="print the `vllm serve` command and exit")
    parser.add_argument("--host", default="127.0.0.1", help="with --print-serve-command")
    parser.add_argument("--port", type=int, default=8000, help="with --print-serve-command")
    args = parser.parse_args(argv)
    if args.print_serve_command:
        print(shlex.join(serve_command(args.model, host=args.host, port=args.port, dtype=args.dtype or "float32")))
        return 0
    items = [(item["question"], item["steps"]) for item in json.load(sys.stdin)["items"]]
    engine = VLLMOfflineEngine(args.model, dtype=args.dtype, enable_prefix_caching=args.prefix_caching)
    engine.score(items[:1])  # warm-up
    best, best_cpu = math.inf, math.inf
    for _ in range(max(1, args.repeat)):
        start, start_cpu = time.perf_counter(), time.process_time()
        scores = engine.score(items)
        best, best_cpu = min(best, time.perf_counter() - start), min(best_cpu, time.process_time() - start_cpu)
    answer = dumps({"scores": scores, "seconds": best, "cpu_seconds": best_cpu, "model": engine.model_id})
    if args.output == "-":
        print(answer)
    else:
        Path(args.output).write_text(answer + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
