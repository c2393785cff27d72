"""What the distilled scorer costs an RL rollout loop: per-turn overhead and turns/s with 64
concurrent sessions, in-process (engine behind the dynamic batcher) and over HTTP (the server on
127.0.0.1 with the async client as the scorer's backend), against the bare engine.

Figures per model: the bare engine scoring every turn in one batched call (the floor) and one
turn per call (no batching); the alignment alone (decode the policy tokens with offsets, split,
map tokens to steps); and the full scorer through `PRMRunner` with `--sessions` sessions scoring
their branches concurrently. Ratios compare the scorer with both engine figures.

    python benchmarks/scorer_overhead.py [--sessions 64] [--turns 3] [--steps 5] [--threads N] [--default-backbone]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import torch
from scoring_throughput import tiny_backbone  # the same tiny random backbone as the scoring benchmark

from prm_distill.scorer import Interaction, ModelResponse, PRMRunner, load_prm_config, score_branches
from prm_distill.scorer.alignment import assign_tokens_to_steps, decode_with_offsets
from prm_distill.serve import PRMEngine
from prm_distill.steps import split_step_spans, split_steps


def export_checkpoint(backbone: str, out: Path) -> Path:
    """An untrained head on `backbone`, exported in the checkpoint format (scores are not the point)."""
    from prm_distill.train.config import LoraSettings, ModelConfig
    from prm_distill.train.model import build_model, export

    cfg = ModelConfig(backbone=backbone)
    model, tok, encoding, _ = build_model(cfg, LoraSettings(enabled=False))
    export(model, tok, str(out), encoding)
    return out


def sessions(tok, n_sessions: int, n_turns: int, n_steps: int) -> list[list[Interaction]]:
    """Each session: one multi-turn branch of arithmetic answers, as real token ids."""
    out = []
    for s in range(n_sessions):
        turns: list[Interaction] = []
        for t in range(n_turns):
            question = f"Session {s}, part {t}: start from {s + t} and add {t + 2} again and again. What do you get?"
            text = "\n\n".join(
                f"Step {k + 1}: {s + t + k * (t + 2)} + {t + 2} = {s + t + (k + 1) * (t + 2)}, so we carry on."
                for k in range(n_steps)
            )
            turns.append(Interaction(
                interaction_id=f"s{s}-t{t}",
                parent=turns[-1] if turns else None,
                messages=[{"role": "user", "content": question}],
                output_message_list=[{"role": "assistant", "content": text}],
                model_response=ModelResponse(
                    input_tokens=tok.encode(question, add_special_tokens=False),
                    output_tokens=tok.encode(text, add_special_tokens=False) + [tok.eos_token_id],
                ),
            ))
        out.append(turns)
    return out


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


async def scorer_wall(config: dict, branches: list[list[Interaction]]) -> float:
    runner = await PRMRunner.create(load_prm_config(config))
    try:
        await asyncio.gather(*(score_branches(branch[:1], runner) for branch in branches[:2]))  # warm-up
        start = time.perf_counter()
        await asyncio.gather(*(score_branches(branch, runner) for branch in branches))
        return time.perf_counter() - start
    finally:
        await runner.aclose()


async def scorer_wall_http(url: str, checkpoint: Path, branches: list[list[Interaction]]) -> float:
    """The same sessions with the scorer's backend being the HTTP server (PRMClient)."""
    from prm_distill.scorer import DistilledPRMScorer
    from prm_distill.serve import PRMClient

    client = await PRMClient.connect(url)
    scorer = DistilledPRMScorer(engine=client, policy_tokenizer=str(checkpoint))
    try:
        return await scorer_wall({"rollout": {"agent": {"prm": {"scorers": [scorer]}}}}, branches)
    finally:
        await scorer.aclose()
        await client.aclose()


def http_wall(checkpoint: Path, branches: list[list[Interaction]], args: argparse.Namespace) -> float:
    from prm_distill.serve import BackgroundServer, ServerConfig
    from prm_distill.serve.client import wait_until_ready

    with BackgroundServer(ServerConfig(model=str(checkpoint), port=0, max_wait_ms=args.max_wait_ms)) as server:
        if not asyncio.run(wait_until_ready(server.url, timeout_s=300)):
            raise RuntimeError(f"the server at {server.url} did not become ready")
        return asyncio.run(scorer_wall_http(server.url, checkpoint, branches))


def bench(name: str, checkpoint: Path, args: argparse.Namespace) -> None:
    engine = PRMEngine.from_checkpoint(checkpoint, device=args.device)
    branches = sessions(engine.tokenizer, args.sessions, args.turns, args.steps)
    turns = [turn for branch in branches for turn in branch]
    items = [(turn.messages[-1]["content"], split_steps(turn.output_message_list[0]["content"])) for turn in turns]
    engine.score(items[:2])  # warm-up
    batched = timed(lambda: engine.score(items))
    unbatched = timed(lambda: [engine.score([item]) for item in items])

    config = {"rollout": {"agent": {"prm": {"scorers": [{
        "path": "prm_distill.scorer.DistilledPRMScorer",
        "kwargs": {"model": str(checkpoint), "policy_tokenizer": str(checkpoint), "device": args.device,
                   "max_wait_ms": args.max_wait_ms},
    }]}}}}

    def align(turn: Interaction) -> list[int]:
        text, ends = decode_with_offsets(engine.tokenizer, turn.model_response.output_tokens)
        return assign_tokens_to_steps(ends, split_step_spans(text))

    alignment = timed(lambda: [align(turn) for turn in turns])
    wall = asyncio.run(scorer_wall(config, branches))
    wall_http = http_wall(checkpoint, branches, args)

    n = len(turns)
    tokens = sum(turn.model_response.output_len for turn in turns) / n
    print(f"\n{name}: {args.sessions} sessions x {args.turns} turns = {n} turns, "
          f"{args.steps} steps and ~{tokens:.0f} output tokens per turn")
    print(f"  bare engine, all turns in one call   {1000 * batched / n:8.2f} ms/turn {n / batched:9.1f} turns/s")
    print(f"  bare engine, one turn per call       {1000 * unbatched / n:8.2f} ms/turn {n / unbatched:9.1f} turns/s")
    print(f"  alignment only (decode, split, map)  {1000 * alignment / n:8.2f} ms/turn")
    print(f"  DistilledPRMScorer via PRMRunner     {1000 * wall / n:8.2f} ms/turn {n / wall:9.1f} turns/s")
    print(f"  DistilledPRMScorer over HTTP         {1000 * wall_http / n:8.2f} ms/turn {n / wall_http:9.1f} turns/s "
          f"(server on 127.0.0.1, same process; {wall_http / wall:.2f}x the in-process time)")
    print(f"  scorer overhead over the batched engine: {1000 * (wall - batched) / n:.2f} ms/turn "
          f"({wall / batched:.2f}x); speed-up over unbatched scoring: {unbatched / wall:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--turns", type=int, default=3, help="turns per session (one branch each)")
    ap.add_argument("--steps", type=int, default=5, help="steps per turn")
    ap.add_argument("--max-wait-ms", type=float, default=5.0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--default-backbone", action="store_true", help="also the embedded SmolLM2-135M")
    ap.add_argument("--threads", type=int, help="torch threads (oversubscribed threads distort every figure)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bench("tiny (2 layers, d=64)", export_checkpoint(tiny_backbone(root / "tiny"), root / "tiny_ckpt"), args)
        if args.default_backbone:
            bench("SmolLM2-135M", export_checkpoint("smollm2", root / "smol_ckpt"), args)


if __name__ == "__main__":
    main()
