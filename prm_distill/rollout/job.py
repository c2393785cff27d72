"""`prm-distill rollout`: k samples per problem from the policy, resumable like a labeling job.

Samples go to append-only shards `rollouts-NNNNN.jsonl`, each written atomically once all samples
of its problems exist; a rerun reads what is there, generates only the missing (problem, sample)
pairs and never writes one twice. When everything is done the shards are merged into
`rollouts.jsonl` (problem order, then sample order) and `summary.json` is written. `job.json`
pins the sampling settings and the policy version: a folder never mixes two policies.

A stop (the first Ctrl-C or SIGTERM, `prm_distill.stop`) ends generation within a token on the
transformers backend (a stopping criterion polls the request; between requests on a server), and
the samples of the shard in hand that had finished are written as a partial shard (any shard may
hold only some of its problems' samples; the merge orders everything), as they are when a server
gives up or a second signal stops at once. The progress bar counts samples, advanced per generated
token where the backend reports tokens, with the ETA and the tokens/s generated.
"""

from __future__ import annotations

import inspect
import logging
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, cast

from .. import stop as stopping
from ..answers import extract_answer, is_correct
from ..atomic import write_json
from ..generate import Generation, GenerationStopped, GenRequest, Policy, Watch, load_policy, problem_messages, sampling_metadata
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


class Progress:
    """Rollout's bar, in samples: where the backend reports tokens each adds 1/max_new_tokens of a
    sample, and a finished sample tops its share up to one, so the bar (and its ETA) moves while a
    batch of 16 x 512 tokens runs for minutes instead of sitting at 0; the postfix gives the samples
    finished and the tokens/s generated."""

    def __init__(self, total: int, max_new_tokens: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.total, self.max_new_tokens = total, max_new_tokens
        self.finished = 0
        self.streamed = 0  # tokens reported one step at a time (transformers)
        self.streamed_finished = 0  # of those, the tokens of finished samples
        self.generated = 0  # every token generated this run, for tokens/s
        self.t0 = time.perf_counter()
        self.bar = tqdm(total=total, unit="sample", disable=not enabled, dynamic_ncols=True, smoothing=0.1,
                        bar_format="{l_bar}{bar}| {n:.1f}/{total_fmt} samples [{elapsed}<{remaining}{postfix}]")

    @property
    def position(self) -> float:
        partial = max(0, self.streamed - self.streamed_finished) / self.max_new_tokens
        return min(float(self.total), self.finished + partial)

    def tokens(self, n: int) -> None:
        self.streamed += n
        self.generated += n
        self._show()

    def sample(self, gen: Generation) -> None:
        self.finished += 1
        if self.streamed:
            self.streamed_finished += gen.tokens_out + (gen.finish_reason == "stop")  # the EOS token was generated too
        else:
            self.generated += gen.tokens_out
        self._show()

    def tokens_per_s(self) -> float:
        return self.generated / max(1e-9, time.perf_counter() - self.t0)

    def _show(self) -> None:
        self.bar.set_postfix_str(f"{self.finished}/{self.total} done, {self.tokens_per_s():.1f} tok/s", refresh=False)
        self.bar.update(self.position - self.bar.n)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _generate(policy: Policy, requests: list[GenRequest], watch: Watch) -> list[Generation]:
    """`policy.generate` with the watch where the backend takes one (every built-in backend); any
    other policy (a test double, an embedding caller's) runs whole, then reports its samples."""
    try:
        takes_watch = "watch" in inspect.signature(policy.generate).parameters
    except (TypeError, ValueError):
        takes_watch = False
    if takes_watch:
        return cast(Any, policy).generate(requests, watch=watch)
    gens = policy.generate(requests)
    for i, gen in enumerate(gens):
        watch.sample(i, gen)
    return gens


def _shard(policy: Policy, cfg: RolloutConfig, items: list[tuple[Problem, int]], shards: Shards, index: int, bar: Progress) -> None:
    """Generate one shard's samples and write them; on a stop, a failure or an interrupt, write the
    ones that finished (a partial shard) before passing it on."""
    seeds = [sample_seed(cfg.seed, p.id, j) for p, j in items]
    reqs = [GenRequest(problem_messages(p.question, cfg.policy.instruction), s, cfg.temperature, cfg.max_new_tokens)
            for (p, _), s in zip(items, seeds)]
    finished: dict[int, Generation] = {}

    def on_sample(i: int, gen: Generation) -> None:
        finished[i] = gen
        bar.sample(gen)

    watch = Watch(on_sample=on_sample, on_tokens=bar.tokens, should_stop=stopping.requested)
    try:
        _generate(policy, reqs, watch)
    except GenerationStopped:
        stopping.check(f"mid-shard, keeping {len(finished)} of its {len(items)} samples that had finished")
        raise
    finally:
        if finished:  # in request order: a whole shard reads as before
            shards.write(index, [make_record(*items[i], finished[i], policy, cfg, seeds[i]) for i in sorted(finished)])


def run_rollout(cfg: RolloutConfig, policy: Policy | None = None) -> dict[str, Any]:
    """Roll out cfg.problems into cfg.output; returns the summary. A policy may be passed in (tests,
    the pipeline); otherwise it is loaded only when something is left to generate. Raises
    PolicyUnavailable when a server gives up, Interrupted on a stop request (within a token on the
    transformers backend): completed shards and the finished samples of the shard in hand stay, and
    a rerun resumes."""
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
        if generator.startswith("transformers:") and str(getattr(getattr(policy, "model", None), "device", "")) == "cpu":
            log.info("transformers on CPU: tens of seconds a sample at max_new_tokens=512 (about 12 tokens/s on 2 cores); "
                     "--backend vllm (.venv-vllm on CPU: about 15x) or --backend openai --base-url URL is faster (docs/rollout.md)")
        _check_job(out, cfg, version)
        try:
            shards = Shards(out, SHARD_STEM)
            first = shards.next_index()
            order = {p.id: i for i, p in enumerate(problems)}
            chunks: dict[int, list[tuple[Problem, int]]] = {}
            for p, j in todo:  # shards group whole problems, so a problem's samples are written together
                chunks.setdefault(order[p.id] // cfg.shard_problems, []).append((p, j))
            # SIGTERM/SIGINT (`prm_distill.stop`): generation stops within a token (transformers) or sends
            # nothing new (servers); the finished samples of the shard in hand are written, then Interrupted
            with stopping.cooperative(), Progress(len(todo), cfg.max_new_tokens, cfg.progress) as bar:
                for n, items in enumerate(chunks.values()):
                    stopping.check(f"after {n} new shard(s)")
                    _shard(policy, cfg, items, shards, first + n, bar)
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
