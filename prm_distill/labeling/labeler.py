"""Turn trajectories into labelled records: prompts -> requests (cached) -> parsed votes -> labels.

Work is organised in rounds: round 0 asks every vote once; a vote whose answer was invalid is
re-asked in the next round with a new seed, up to `max_invalid_retries` times. Every answer goes
through the response cache first, so a resumed job replays answered votes for free.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable

from ..records import Trajectory
from .anchor import anchor
from .cache import ResponseCache, cache_key
from .config import JudgeConfig, LabelJobConfig
from .judges import arithmetic
from .judges.base import Completion, Interrupted, Judge, JudgeUnavailable, Request
from .judges.reference import VERSION as REF_VERSION, check_reference, label_record
from .montecarlo import VERSION as MC_VERSION, binary_labels, check_gold, consensus, continuation_prompts, estimate, next_prefix, reaches_gold
from .negatives import hard_negatives
from .parse import parse_first_error, parse_score, parse_trajectory
from .prompts import Prompt, prompt_version, prompts_for
from .votes import aggregate_step


def rollout_of(r: Trajectory) -> Trajectory:
    """The unlabelled rollout the judges see; labels it already had are kept as metadata.input_labels
    (to measure the judge against them), never shown to a judge."""
    meta = dict(r.metadata)
    if r.labels is not None:
        meta["input_labels"] = list(r.labels)
    return Trajectory(id=r.id, question=r.question, steps=list(r.steps), outcome=r.outcome, metadata=meta)


@dataclass
class _Unit:
    """One vote of one judge on one prompt: fills `got` (step -> vote) from the first valid answer(s)."""

    judge: int
    record: int
    prompt: Prompt
    vote: int
    steps: list[int]
    gold: str | None = None  # Monte-Carlo units: the answer the completion must reach
    got: dict[int, float] = field(default_factory=dict)
    done: bool = False


@dataclass
class _Cost:
    answers: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    valid: int = 0
    invalid: int = 0


@dataclass
class RunStats:
    """What this process paid: fresh requests (latencies kept for percentiles) and cache hits."""

    sent: int = 0
    cache_hits: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latencies: list[float] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def _binary(jc: JudgeConfig) -> bool:
    return jc.montecarlo and jc.mc_search == "binary"


class Labeler:
    """Labels batches of trajectories with the configured judges (and verifier)."""

    def __init__(self, cfg: LabelJobConfig, judges: list[Judge], cache: ResponseCache,
                 on_answer: Callable[[int, Completion], None] | None = None):
        self.cfg, self.judges, self.cache = cfg, judges, cache
        self.judge_cfgs: list[JudgeConfig] = cfg.all_judges()
        self.stats = RunStats()
        self.on_answer = on_answer  # (steps covered, completion) -> progress bar
        # most votes a step can get: `votes` per LLM judge, one estimate per Monte-Carlo judge, the verifier's
        # (the verifier votes only to refute, so it never counts towards the quorum unless it labels alone)
        per_step = sum(jc.step_votes(cfg.votes) for jc in self.judge_cfgs) + int(cfg.verifier.alone)
        self.min_valid = min(cfg.min_valid_votes, per_step)

    def _request(self, u: _Unit, attempt: int, n_steps: int) -> Request:
        jc = self.judge_cfgs[u.judge]
        max_tokens = min(jc.max_tokens * n_steps, 4 * jc.max_tokens) if self.cfg.mode == "trajectory" else jc.max_tokens
        return Request(u.prompt, jc.seed + u.vote + 1000 * attempt, jc.temperature, max_tokens)

    def _apply(self, u: _Unit, c: Completion, n_steps: int, cost: _Cost, first_round: bool) -> None:
        cost.answers += 1
        cost.tokens_in += c.tokens_in
        cost.tokens_out += c.tokens_out
        cost.latency_s += c.latency_s
        if first_round and self.on_answer:
            self.on_answer(len(u.steps), c)
        mode = self.cfg.mode
        if u.gold is not None:  # a Monte-Carlo completion: did it reach the gold answer?
            cost.valid += 1
            u.got[u.steps[0]] = reaches_gold(c.text, u.gold)
        elif mode == "prefix":
            v = parse_score(c.text)
            if v is None:
                cost.invalid += 1
            else:
                cost.valid += 1
                u.got[u.steps[0]] = v
        elif mode == "trajectory":
            vals = parse_trajectory(c.text, n_steps)
            for k in u.steps:
                if k in u.got:
                    continue
                if vals[k] is None:
                    cost.invalid += 1
                else:
                    cost.valid += 1
                    u.got[k] = vals[k]
        else:
            e = parse_first_error(c.text, n_steps)
            if e is None:
                cost.invalid += 1
            else:
                cost.valid += 1
                u.got = {k: 1.0 for k in range(n_steps if e < 0 else e)} | ({} if e < 0 else {e: 0.0})
                u.done = True
        u.done = u.done or all(k in u.got for k in u.steps)

    async def _round(self, units: list[_Unit], records: list[Trajectory], costs: list[_Cost], attempt: int, stop: asyncio.Event) -> None:
        fresh: dict[int, list[tuple[_Unit, Request, str]]] = {}
        for u in units:
            n = len(records[u.record].steps)
            req = self._request(u, attempt, n)
            key = cache_key(self.judge_cfgs[u.judge].name, req, u.vote)
            hit = self.cache.get(key)
            if hit is not None:
                self.stats.cache_hits += 1
                self._apply(u, hit, n, costs[u.record], attempt == 0)
            else:
                fresh.setdefault(u.judge, []).append((u, req, key))

        async def run(j: int, items: list[tuple[_Unit, Request, str]]) -> None:
            async for i, c in self.judges[j].stream([r for _, r, _ in items], stop):
                u, _, key = items[i]
                self.cache.put(key, c)
                self.stats.sent += 1
                self.stats.tokens_in += c.tokens_in
                self.stats.tokens_out += c.tokens_out
                self.stats.latencies.append(c.latency_s)
                self._apply(u, c, len(records[u.record].steps), costs[u.record], attempt == 0)

        try:
            async with asyncio.TaskGroup() as tg:
                for j, items in fresh.items():
                    tg.create_task(run(j, items))
        except BaseExceptionGroup as eg:  # surface the judge's own error, not the group
            for kind in (JudgeUnavailable, Interrupted):
                if (sub := eg.subgroup(kind)) is not None:
                    raise sub.exceptions[0] from None
            raise

    async def label(self, records: list[Trajectory], stop: asyncio.Event) -> list[Trajectory]:
        """Labelled copies of `records` (plus hard negatives, minus records dropped by anchoring)."""
        if any(jc.montecarlo for jc in self.judge_cfgs):
            check_gold(records)
        if any(jc.reference for jc in self.judge_cfgs):
            check_reference(records)
        units = [
            _Unit(j, ri, p, v, [p.step] if p.step is not None else list(range(len(r.steps))),
                  str(r.metadata["answer"]) if jc.montecarlo else None)
            for ri, r in enumerate(records)
            for j, jc in enumerate(self.judge_cfgs) if not (jc.reference or _binary(jc))  # the rule sends nothing; a search asks as it goes
            for v in range(jc.votes_per_step or self.cfg.votes)
            for p in (continuation_prompts(r.question, r.steps, jc.instruction) if jc.montecarlo else prompts_for(self.cfg.mode, r.question, r.steps))
        ]
        costs = [_Cost() for _ in records]
        for attempt in range(self.cfg.max_invalid_retries + 1):
            pending = [u for u in units if not u.done]
            if not pending:
                break
            await self._round(pending, records, costs, attempt, stop)
        searched = await self._search(records, costs, stop)
        out = []
        for ri, r in enumerate(records):
            found = {self.judge_cfgs[j].name: ev for (j, i), ev in searched.items() if i == ri}
            labelled = self._finish(r, [u for u in units if u.record == ri], costs[ri], found)
            if self.cfg.anchor.enabled:
                labelled, _ = anchor(labelled, self.cfg.anchor)
                if labelled is None:
                    self.stats.dropped.append(r.id)
                    continue
            out.append(labelled)
            out.extend(hard_negatives(labelled, self.cfg.negatives))
        return out

    async def _search(self, records: list[Trajectory], costs: list[_Cost], stop: asyncio.Event) -> dict[tuple[int, int], dict[int, list[float]]]:
        """Binary search (judge.mc_search=binary) for each record's first bad prefix: one round per
        search level, every record of the batch together; (judge, record) -> {prefix: outcomes}.
        Requests are those the full search would send for the same prefix, so the cache serves both."""
        found: dict[tuple[int, int], dict[int, list[float]]] = {
            (j, ri): {} for j, jc in enumerate(self.judge_cfgs) if _binary(jc) for ri in range(len(records))}
        if not found:
            return found
        last_ok = [reaches_gold("\n\n".join(r.steps), r.metadata["answer"]) for r in records]
        prompts: dict[tuple[int, int], list[Prompt]] = {}
        while True:
            units = []
            for (j, ri), ev in found.items():
                k = next_prefix(ev, len(records[ri].steps), last_ok[ri])
                if k is None:
                    continue
                jc, r = self.judge_cfgs[j], records[ri]
                if (j, ri) not in prompts:
                    prompts[(j, ri)] = list(continuation_prompts(r.question, r.steps, jc.instruction))
                units += [_Unit(j, ri, prompts[(j, ri)][k], v, [k], str(r.metadata["answer"])) for v in range(jc.n)]
            if not units:
                return found
            await self._round(units, records, costs, 0, stop)
            for u in units:  # in vote order
                found[(u.judge, u.record)].setdefault(u.steps[0], []).append(u.got[u.steps[0]])

    def _finish(self, r: Trajectory, units: list[_Unit], cost: _Cost, searched: dict[str, dict[int, list[float]]] | None = None) -> Trajectory:
        names = [jc.name for jc in self.judge_cfgs]
        mc = {jc.name: jc for jc in self.judge_cfgs if jc.montecarlo}
        ref = [jc.name for jc in self.judge_cfgs if jc.reference]
        verdict = label_record(r) if ref else None
        searched = searched or {}
        use_verifier = self.cfg.verifier.active
        voters = names + ([arithmetic.NAME] if use_verifier else [])
        checks = arithmetic.verify_steps(r.steps) if use_verifier else [None] * len(r.steps)
        last_ok = reaches_gold("\n\n".join(r.steps), r.metadata["answer"]) if mc else 0.0  # the complete solution's own answer
        search = {name: binary_labels(searched[name], len(r.steps), last_ok, mc[name].estimate) for name in searched}
        steps = []
        mc_raw: dict[str, dict[str, list[int]]] = {name: {"correct": [], "completions": []} for name in mc}
        for k in range(len(r.steps)):
            by_judge: dict[str, list[float]] = {name: [] for name in names}
            for u in sorted(units, key=lambda u: u.vote):
                if k in u.got:
                    by_judge[names[u.judge]].append(u.got[k])
            for name, jc in mc.items():  # a Monte-Carlo judge casts one vote per step: its estimate
                if name in search:
                    by_judge[name] = list(searched[name].get(k, []))
                outcomes = by_judge[name] if k < len(r.steps) - 1 else [last_ok]
                mc_raw[name]["correct"].append(int(sum(outcomes)))
                mc_raw[name]["completions"].append(len(outcomes) if k < len(r.steps) - 1 else 0)
                est = search[name][0][k] if name in search else estimate(outcomes, jc.estimate)
                by_judge[name] = [] if est is None else [est]
            for name in ref:  # the rule casts one vote on each step it labels
                lab = verdict.labels[k]  # type: ignore[union-attr]
                by_judge[name] = [] if lab is None else [lab]
            # the verifier refutes and never confirms: true arithmetic proves nothing about the step (a wrong
            # operand or operation can be computed correctly), so it gets no vote; alone it is the only labeler
            check = checks[k]
            if check is not None and (check == 0.0 or self.cfg.verifier.alone):
                by_judge[arithmetic.NAME] = [check]
            veto = self.cfg.verifier.veto and check == 0.0
            steps.append(aggregate_step(by_judge, self.min_valid, veto))
        agreed = self._consensus(steps, mc) if self.cfg.consensus.enabled else None
        only = "montecarlo" if names and len(mc) == len(names) else "reference" if names and len(ref) == len(names) else None
        judge: dict[str, Any] = {
            "mode": only or (self.cfg.mode if names else "verifier"),
            "prompt_version": {"montecarlo": MC_VERSION, "reference": REF_VERSION}.get(only or "", prompt_version(self.cfg.mode)) if names else None,
            "judges": voters,
            "votes_per_judge": self.cfg.votes,
            "min_valid_votes": self.min_valid,
            "by_judge": {n: [st.by_judge.get(n, []) for st in steps] for n in voters},
            "agreement": [st.agreement for st in steps],
            "vetoed_steps": [k for k, st in enumerate(steps) if st.vetoed],
            "valid_votes": cost.valid, "invalid_votes": cost.invalid,
            "answers": cost.answers, "tokens_in": cost.tokens_in, "tokens_out": cost.tokens_out,
            "latency_s": round(cost.latency_s, 4),
        }
        if mc:
            judge["montecarlo"] = {name: {"n": jc.n, "estimate": jc.estimate, **mc_raw[name]} for name, jc in mc.items()}
            for name, (_, e) in search.items():
                judge["montecarlo"][name] |= {"search": "binary", "prefixes_sampled": len(searched[name]), "first_error": e}
        if verdict is not None:
            judge["reference"] = verdict.as_dict()
        if agreed is not None:
            judge["consensus"] = {k: v for k, v in agreed.items() if k != "labels"}
        labels = [st.label for st in steps] if agreed is None else [0.0 if st.vetoed else lab for st, lab in zip(steps, agreed["labels"])]
        return Trajectory(id=r.id, question=r.question, steps=list(r.steps), labels=labels,
                          votes=[st.votes for st in steps], judge=judge, outcome=r.outcome, metadata=dict(r.metadata))

    def _consensus(self, steps: list, mc: dict[str, JudgeConfig]) -> dict:
        """Monte-Carlo estimate vs the LLM judges' mean vote per step, and the labels the rule keeps
        (a verifier veto still wins afterwards: a false equation is 0 whoever agrees)."""
        cc = self.cfg.consensus
        (mc_name,) = mc
        llm = [jc.name for jc in self.judge_cfgs if not jc.montecarlo]
        need = min(self.cfg.min_valid_votes, sum(jc.step_votes(self.cfg.votes) for jc in self.judge_cfgs if not jc.montecarlo))
        mc_labels, judge_labels = [], []
        for st in steps:
            est = st.by_judge.get(mc_name) or []
            mc_labels.append(est[0] if est else None)
            votes = [v for name in llm for v in st.by_judge.get(name, [])]
            judge_labels.append(sum(votes) / len(votes) if len(votes) >= need else None)
        labels, kept = consensus(mc_labels, judge_labels, cc.rule, cc.threshold, cc.value)
        return {"rule": cc.rule, "threshold": cc.threshold, "value": cc.value, "montecarlo": mc_labels, "judge": judge_labels, "kept": kept, "labels": labels}
