"""Best-of-N on GSM8K test problems: k samples each from the embedded policy (SmolLM2-135M-Instruct),
reranked by a PRM checkpoint; accuracy per aggregation against majority vote, random pick and the
oracle (pass@N), and the gain over majority vote at the largest N.

Two stages, each resumable (rerun the same command to finish an interrupted run):
1. `prm_distill.rollout.run_rollout` samples k solutions per problem (transformers on CPU, or
   `--policy-backend vllm|openai` where available) into OUTPUT/rollouts/rollouts.jsonl;
2. `prm_distill.select.run_rerank` scores them with CHECKPOINT and writes OUTPUT/ranked.jsonl,
   OUTPUT/report.json (`best_of_n[agg][N]`) and OUTPUT/best_of_n.png.

    python benchmarks/rerank_gsm8k.py CHECKPOINT [--limit 50] [--k 8] [--output runs/bench-rerank-gsm8k]
    # the method (an aggregation's best-of-N, or vote:AGG, the PRM-weighted vote) chosen on 64 GSM8K train problems
    # (sampled into OUTPUT/choose), then reported on the test ones:
    python benchmarks/rerank_gsm8k.py CHECKPOINT --choose-on ../shared/data/gsm8k/train.jsonl --choose-limit 64 --n-grid every

With a weak policy, majority vote is hard to beat and the gain may be small or negative: the script
reports what it measures. Sampling is the slow part on a CPU: use vLLM where it is installed
(`.venv-vllm/bin/python benchmarks/rerank_gsm8k.py ... --policy-backend vllm`; on 2 cores about
50 s per 64 samples of the 135M policy, against 14 min with transformers on a loaded machine).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from prm_distill.atomic import write_json
from prm_distill.generate import PolicyConfig
from prm_distill.metrics import fmt
from prm_distill.rollout import RolloutConfig, run_rollout
from prm_distill.select import RerankConfig, open_scorer, run_rerank
from prm_distill.select.backend import close_scorer
from prm_distill.select.rerank import choose_aggregation, format_table, method_accuracy

GSM8K_TEST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k" / "test.jsonl"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="PRM checkpoint folder (e.g. the student trained with configs/recipe-cpu.yaml)")
    p.add_argument("--problems", default=str(GSM8K_TEST), help="GSM8K-style JSONL (question, answer with ####)")
    p.add_argument("--limit", type=int, default=50, help="first N problems")
    p.add_argument("--k", type=int, default=8, help="samples per problem (N goes 1, 2, 4, ... up to k)")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--max-new-tokens", type=int, default=320)
    p.add_argument("--policy", default="smollm2", help="policy to sample from (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--policy-backend", default="transformers", choices=("auto", "transformers", "vllm", "openai"))
    p.add_argument("--batch-size", type=int, default=16, help="transformers: sequences per generate call")
    p.add_argument("--agg", default="min", help="aggregation of the written choice (the report covers all; --choose-on replaces it)")
    p.add_argument("--device", default="cpu", help="device of the PRM and of the transformers policy")
    p.add_argument("--threads", type=int, help="torch threads (on a shared, busy CPU, 1 avoids threads spinning on taken cores)")
    p.add_argument("--rollouts", help="rerank this rollouts.jsonl (e.g. from `prm-distill rollout`) instead of sampling")
    p.add_argument("--choose-on", help="choose the aggregation on these problems first (e.g. GSM8K train.jsonl), sampled the same way")
    p.add_argument("--choose-limit", type=int, default=64, help="first N problems of --choose-on")
    p.add_argument("--n-grid", default="doubling", choices=("doubling", "every"), help="N = 1, 2, 4, ... or every N up to k")
    p.add_argument("--output", default="runs/bench-rerank-gsm8k")
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    out = Path(args.output)
    chosen_on = None
    if args.choose_on:  # the aggregation is chosen on other problems (e.g. GSM8K train), never on the test problems
        rep_c, t_c, _ = sample_and_rerank(args, args.choose_on, args.choose_limit, out / "choose", None, "min")
        args.agg = choose_aggregation(rep_c)
        n_c = str(rep_c["n_values"][-1])
        chosen_on = {"problems": args.choose_on, "limit": args.choose_limit, "agg": args.agg,
                     "at_largest_n": {m: method_accuracy(rep_c, m)[n_c] for m in rep_c["gain_over_majority_at_largest_n"]},
                     "majority_vote_at_largest_n": rep_c["baselines"]["majority_vote"][n_c], "seconds": t_c}
        print(f"aggregation chosen on {rep_c['problems']} problems of {args.choose_on}: {args.agg} "
              f"(at N={n_c} {chosen_on['at_largest_n'][args.agg]:.3f} vs majority vote {chosen_on['majority_vote_at_largest_n']:.3f})")
    rep, t, generated = sample_and_rerank(args, args.problems, args.limit, out, args.rollouts, args.agg)

    print(f"{rep['problems']} problems from {args.problems}; PRM {args.checkpoint}")
    print(format_table(rep))
    top = rep["n_values"][-1] if rep["n_values"] else None
    if top is not None:
        gains = rep["gain_over_majority_at_largest_n"]
        print(f"gain over majority vote at N={top}: " + ", ".join(f"{a} {g:+.3f}" if g is not None else f"{a} n/a" for a, g in gains.items()))
        if chosen_on:
            g = gains[args.agg]
            print(f"the chosen aggregation ({args.agg}): " + ("n/a" if g is None else f"{g:+.3f}"))
    print("sample AUROC, right vs wrong samples (within problem / pooled): " + ", ".join(
        f"{a} {fmt(v['within_problem'])} / {fmt(v['pooled'])}" for a, v in rep["sample_auroc"].items()))
    print(f"sampling {t['sample']:.1f}s (this run: {generated} samples), scoring and rerank {t['rerank']:.1f}s")
    bench = {"problems": rep["problems"], "k": args.k, "policy": args.policy, "checkpoint": args.checkpoint,
             "agg": args.agg, "chosen_on": chosen_on, "n_values": rep["n_values"],
             "best_of_n": rep["best_of_n"], "weighted_vote": rep["weighted_vote"], "baselines": rep["baselines"],
             "gain_over_majority": rep["gain_over_majority_at_largest_n"], "sample_auroc": rep["sample_auroc"],
             "sampling_s": round(t["sample"], 1), "rerank_s": round(t["rerank"], 1), "samples_generated": generated}
    write_json(out / "bench.json", bench)
    print(f"report: {out / 'report.json'}, plot: {rep.get('plot', 'none')}")
    return 0


def sample_and_rerank(args: argparse.Namespace, problems: str, limit: int, out: Path, rollouts_file: str | None,
                      agg: str) -> tuple[dict, dict[str, float], int]:
    """Sample `limit` problems (unless a rollouts file is given), then rerank them: (report, seconds, samples made)."""
    t0 = time.perf_counter()
    rollouts, generated = Path(rollouts_file) if rollouts_file else out / "rollouts" / "rollouts.jsonl", 0
    if not rollouts_file:
        policy = PolicyConfig(policy=args.policy, backend=args.policy_backend, device=args.device, batch_size=args.batch_size)
        summary = run_rollout(RolloutConfig(problems=problems, output=str(out / "rollouts"), k=args.k, limit=limit,
                                            temperature=args.temperature, max_new_tokens=args.max_new_tokens, policy=policy))
        generated = summary["this_run"]["samples_generated"]
    t1 = time.perf_counter()
    scorer = open_scorer(model=args.checkpoint, device=args.device)
    try:
        # a weighted vote (vote:AGG) writes as `chosen` the sample AGG ranks first; the report has both
        rep = run_rerank(scorer, rollouts, out / "ranked.jsonl", RerankConfig(agg=agg.removeprefix("vote:"), n_grid=args.n_grid))
    finally:
        close_scorer(scorer)
    return rep, {"sample": t1 - t0, "rerank": time.perf_counter() - t1}, generated


if __name__ == "__main__":
    raise SystemExit(main())
