"""`prm-distill rollout`: k samples per problem from the policy, resumable like a labeling job.

Samples go to append-only shards `rollouts-NNNNN.jsonl`, each written atomically once all samples
of its problems exist; a rerun reads what is there, generates only the missing (problem, sample)
pairs and never writes one twice. When everything is done the shards are merged into
`rollouts.jsonl` (problem order, then sample order) and `summary.json` is written. `job.json`
pins the sampling settings and the policy version: a folder never mixes two policies.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

from .. import stop as stopping
from ..answers import extract_answer, is_correct
from ..atomic import write_json
from ..generate import Generation, GenRequest, Policy, load_policy, problem_messages, sampling_metadata
from ..jobfiles import Shards, check_job
from ..steps import StepSplitError, split_steps
from .config import RolloutConfig
from .problems import Problem, load_problems

log = logging.getLogger("prm_distill.rollout")
ROLLOUTS = "rollouts.jsonl"
SHARD_STEM = "rollouts"  # shards rollouts-NNNNN.jsonl, merged into rollouts.jsonl (`jobfiles.Shards`)


def sample_id(problem_id: str, j: int) -> str:
    return f"{problem_id}#{j}"


def sample_seed(seed: int, problem_id: str, j: int) -> int:
    """Stable per (seed, problem, sample): a resumed run asks for exactly the same samples."""
    return (seed * 1_000_003 + zlib.crc32(problem_id.encode()) * 101 + j) % (2**31)


def _identity(cfg: RolloutConfig) -> dict[str, Any]:
    return {"problems": cfg.problems, "split": cfg.dataset_split,  # job.json key kept: folders rolled out before the rename resume
            "k": cfg.k, "temperature": cfg.temperature, "max_new_tokens": cfg.max_new_tokens,
            "seed": cfg.seed, "top_p": cfg.policy.top_p, "instruction": cfg.policy.instruction, "policy": cfg.policy.policy}


def _check_job(out: Path, cfg: RolloutConfig, version: str | None) -> None:
    """Refuse to mix samples of different settings (or policy versions, once known) in one folder."""
    check_job(out / "job.json", {**_identity(cfg), "policy_version": version}, pending=["policy_version"])


def _done(out: Path) -> dict[str, dict[str, Any]]:
    """Samples already written (merged file and shards), by sample id; the first copy wins."""
    return {rec["id"]: rec for rec in Shards(out, SHARD_STEM).rows(key=lambda d: d["id"])}


def make_record(problem: Problem, j: int, gen: Generation, policy: Policy, cfg: RolloutConfig, seed: int) -> dict[str, Any]:
    """One rollout: the response split with the shared splitter, its answer checked against the gold one."""
    try:
        steps = split_steps(gen.text, cfg.splitter)
    except StepSplitError:
        steps = []  # an empty response is kept (it is what the policy did); `prm-distill label` skips it with a warning
    pred = extract_answer(gen.text)
    correct = is_correct(gen.text, problem.answer) if problem.answer is not None else None
    meta = {
        "generator": policy.name,
        "policy_version": policy.version,
        "sampling": sampling_metadata(cfg.policy, cfg.temperature, cfg.max_new_tokens, seed),
        "problem_id": problem.id,
        "sample": j,
        "predicted_answer": pred.text if pred is not None else None,
        "finish_reason": gen.finish_reason,
        "tokens_in": gen.tokens_in,
        "tokens_out": gen.tokens_out,
    }
    rec: dict[str, Any] = {"id": sample_id(problem.id, j), "question": problem.question, "steps": steps, "response": gen.text,
                           "answer": problem.answer, "outcome": None if correct is None else float(correct), "metadata": meta}
    if problem.reference is not None:  # the gold worked solution, for `prm-distill label judge.backend=reference`
        rec["reference"] = problem.reference
    return rec


def summarize(records: list[dict[str, Any]], problems: list[Problem], cfg: RolloutConfig, generator: str | None,
              version: str | None, generated: int, elapsed_s: float) -> dict[str, Any]:
    judged = [r for r in records if r["outcome"] is not None]
    by_problem: dict[str, list[float]] = {}
    for r in judged:
        by_problem.setdefault(r["metadata"]["problem_id"], []).append(r["outcome"])
    n = len(records)
    return {
        "problems": len(problems),
        "problems_with_answer": sum(p.answer is not None for p in problems),
        "samples": n,
        "k": cfg.k,
        "generator": generator,
        "policy_version": version,
        "sampling": sampling_metadata(cfg.policy, cfg.temperature, cfg.max_new_tokens, cfg.seed),
        "accuracy": round(sum(r["outcome"] for r in judged) / len(judged), 4) if judged else None,
        "pass_at_k": round(sum(max(v) for v in by_problem.values()) / len(by_problem), 4) if by_problem else None,
        "no_answer_found": sum(r["metadata"]["predicted_answer"] is None for r in records),
        "empty_responses": sum(not r["steps"] for r in records),
        "mean_steps": round(sum(len(r["steps"]) for r in records) / n, 3) if n else None,
        "finish_reasons": dict(Counter(r["metadata"]["finish_reason"] for r in records)),
        "tokens_out": sum(r["metadata"]["tokens_out"] for r in records),
        "this_run": {"samples_generated": generated, "elapsed_s": round(elapsed_s, 2)},
    }


def run_rollout(cfg: RolloutConfig, policy: Policy | None = None) -> dict[str, Any]:
    """Roll out cfg.problems into cfg.output; returns the summary. A policy may be passed in (tests,
    the pipeline); otherwise it is loaded only when something is left to generate. Raises
    PolicyUnavailable when a server gives up, Interrupted on a stop request (after writing the shard
    in hand): completed shards stay and a rerun resumes."""
    from tqdm import tqdm

    t0 = time.perf_counter()
    out = Path(cfg.output)
    problems = load_problems(cfg.problems, split=cfg.dataset_split, limit=cfg.limit)
    out.mkdir(parents=True, exist_ok=True)
    _check_job(out, cfg, None)
    done = _done(out)
    todo = [(p, j) for p in problems for j in range(cfg.k) if sample_id(p.id, j) not in done]
    log.info("%d problems x %d samples: %d already written, %d to generate", len(problems), cfg.k, len(problems) * cfg.k - len(todo), len(todo))
    own = policy is None
    generator = version = None
    if todo:
        policy = policy or load_policy(cfg.policy)
        generator, version = policy.name, policy.version
        _check_job(out, cfg, version)
        try:
            shards = Shards(out, SHARD_STEM)
            first = shards.next_index()
            order = {p.id: i for i, p in enumerate(problems)}
            chunks: dict[int, list[tuple[Problem, int]]] = {}
            for p, j in todo:  # shards group whole problems, so a problem's samples are written together
                chunks.setdefault(order[p.id] // cfg.shard_problems, []).append((p, j))
            # SIGTERM/SIGINT (`prm_distill.stop`): the shard in hand is finished and written, then Interrupted
            with stopping.cooperative(), tqdm(total=len(todo), unit="sample", disable=not cfg.progress, dynamic_ncols=True) as bar:
                for n, items in enumerate(chunks.values()):
                    stopping.check(f"after {n} new shard(s)")
                    seeds = [sample_seed(cfg.seed, p.id, j) for p, j in items]
                    reqs = [GenRequest(problem_messages(p.question, cfg.policy.instruction), s, cfg.temperature, cfg.max_new_tokens)
                            for (p, _), s in zip(items, seeds)]
                    gens = policy.generate(reqs)
                    shards.write(first + n, [make_record(p, j, g, policy, cfg, s) for (p, j), g, s in zip(items, gens, seeds)])
                    bar.update(len(items))
        finally:
            if own:
                policy.close()
    done = _done(out)
    ids = [sample_id(p.id, j) for p in problems for j in range(cfg.k)]
    records = [done[i] for i in ids]
    wanted = set(ids)
    extra = [r for i, r in done.items() if i not in wanted]  # e.g. a rerun with a smaller --limit: kept, never dropped
    Shards(out, SHARD_STEM).merge(records + extra)
    if records:
        generator = generator or records[0]["metadata"]["generator"]
        version = version or records[0]["metadata"]["policy_version"]
    summary = summarize(records, problems, cfg, generator, version, len(todo), time.perf_counter() - t0)
    write_json(out / "summary.json", summary)
    return summary
