"""Tokens per forward pass on CPU: the same items scored by one engine with passes of up to N
tokens (batch x longest window), for several N, interleaved over rounds. Prints wall and process
CPU seconds per setting and the ratio to the largest N; scores are checked equal across settings.
It is how `serve.engine.CPU_FORWARD_TOKENS` was chosen.

    python benchmarks/forward_tokens.py CHECKPOINT --items items.jsonl [--limit 96 --sizes 16384,4096,2048,1024,512 --rounds 2]

`items.jsonl`: one `{"question": ..., "steps": [...]}` per line (e.g. the ProcessBench rows that
benchmarks/vs_trl.py writes to runs/vs_trl/rows/); without --items, embedded synthetic trajectories (short ones).
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--items", help="JSONL with question and steps")
    ap.add_argument("--limit", type=int, default=96)
    ap.add_argument("--sizes", default="16384,4096,2048,1024,512", help="forward_tokens settings, the first is the reference")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from prm_distill.serve.engine import PRMEngine

    if a.items:
        rows = [json.loads(x) for x in open(a.items, encoding="utf-8") if x.strip()][: a.limit]
        items = [(r["question"], r["steps"]) for r in rows]
    else:
        from prm_distill.synthetic import SyntheticConfig, generate

        items = [(t.question, t.steps) for t in generate(SyntheticConfig(n=a.limit, seed=0))]
    sizes = [int(x) for x in a.sizes.split(",")]
    engines = {n: PRMEngine.from_checkpoint(a.checkpoint, device="cpu", dtype=a.dtype, verifier=False, forward_tokens=n, max_batch_tokens=max(sizes))
               for n in sizes}
    tokens = sum(engines[sizes[0]].encode(q, s).n_tokens for q, s in items)
    wall = {n: 0.0 for n in sizes}
    cpu = {n: 0.0 for n in sizes}
    scores = {}
    for n in sizes:
        engines[n].score(items[:2])  # warm-up
    for _ in range(a.rounds):
        for n in sizes:
            t, c = time.perf_counter(), time.process_time()
            scores[n] = engines[n].score(items)
            wall[n] += time.perf_counter() - t
            cpu[n] += time.process_time() - c
    ref = sizes[0]
    worst = max(abs(x - y) for n in sizes for r0, r1 in zip(scores[ref], scores[n]) for x, y in zip(r0, r1))
    print(f"{len(items)} items, {tokens} tokens, {a.dtype}, {a.threads} threads, {a.rounds} interleaved rounds; largest score difference {worst:.1e}")
    print(f"{'tokens/pass':>12}{'wall s':>9}{'cpu s':>9}{'tokens/s':>10}{'x ' + str(ref):>10}")
    for n in sizes:
        print(f"{n:>12}{wall[n] / a.rounds:>9.2f}{cpu[n] / a.rounds:>9.2f}{tokens * a.rounds / wall[n]:>10.0f}{wall[ref] / wall[n]:>10.2f}")


if __name__ == "__main__":
    main()
