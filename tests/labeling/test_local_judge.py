"""The in-process transformers judge (on a tiny random Llama with the real SmolLM2 tokenizer) and
`label_records`, the in-memory entry point: constrained verdicts are exact sequence probabilities,
always parse, and are sampled per seed; free generation respects its token budget."""

from __future__ import annotations

import asyncio

import pytest
import torch

from prm_distill.labeling import LabelJobConfig, label_records
from prm_distill.labeling.config import JudgeConfig, VerifierConfig
from prm_distill.labeling.judges.base import Request
from prm_distill.labeling.judges.local import LocalJudge
from prm_distill.labeling.parse import parse_first_error, parse_score
from prm_distill.labeling.prompts import prompts_for
from prm_distill.synthetic import SyntheticConfig, generate

RECS = generate(SyntheticConfig(n=2, seed=2, min_events=1, max_events=2))


@pytest.fixture(scope="module")
def judge(tiny_backbone):
    return LocalJudge(JudgeConfig(backend="local", model=str(tiny_backbone), verdict="constrained", batch_size=4))


def _collect(judge, reqs):
    async def run():
        return {i: c async for i, c in judge.stream(reqs, asyncio.Event())}

    return asyncio.run(run())


def test_constrained_options_are_exact_log_probabilities_of_each_answer(judge):
    req = Request(prompts_for("prefix", RECS[0].question, RECS[0].steps)[1], seed=0, temperature=0.2, max_tokens=8)
    opts = judge._options(req)
    assert [o[0] for o in opts] == ["Score: 0", "Score: 0.5", "Score: 1"]
    tok, model = judge.local.tok, judge.local.model
    ctx = tok(judge._chat(req) + "Score:", add_special_tokens=False).input_ids
    for text, lp, _, _ in opts:
        cont = tok(text.removeprefix("Score:"), add_special_tokens=False).input_ids + [tok.eos_token_id]
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([ctx + cont])).logits[0].float(), -1)
        direct = sum(float(logp[len(ctx) - 1 + j, t]) for j, t in enumerate(cont))
        assert lp == pytest.approx(direct, abs=1e-3)


def test_constrained_votes_always_parse_and_are_reproducible_per_seed(judge):
    r = RECS[0]
    reqs = [Request(p, seed=s, temperature=t, max_tokens=8) for p in prompts_for("prefix", r.question, r.steps) for s in (0, 1, 2) for t in (0.0, 5.0)]
    reqs += [Request(prompts_for("first_error", r.question, r.steps)[0], seed=0, temperature=0.2, max_tokens=8)]
    out = _collect(judge, reqs)
    for i, req in enumerate(reqs):
        if req.prompt.mode == "prefix":
            assert parse_score(out[i].text) is not None
        else:
            assert parse_first_error(out[i].text, len(r.steps)) is not None
    greedy = {out[i].text for i, q in enumerate(reqs) if q.temperature == 0.0 and q.prompt.step == 0}
    assert len(greedy) == 1  # temperature 0: the argmax, whatever the seed
    again = _collect(judge, reqs)
    assert [again[i].text for i in range(len(reqs))] == [out[i].text for i in range(len(reqs))]


def test_free_generation_is_batched_and_keeps_to_max_tokens(tiny_backbone):
    j = LocalJudge(JudgeConfig(backend="local", model=str(tiny_backbone), batch_size=3))
    reqs = [Request(p, seed=0, temperature=0.7, max_tokens=5) for p in prompts_for("prefix", RECS[1].question, RECS[1].steps)]
    out = _collect(j, reqs)
    assert sorted(out) == list(range(len(reqs)))
    assert all(0 <= c.tokens_out <= 5 and c.tokens_in > 50 for c in out.values())


def test_label_records_with_local_judge_and_verifier(tiny_backbone):
    cfg = LabelJobConfig(mode="prefix", votes=3, judge=JudgeConfig(backend="local", model=str(tiny_backbone), verdict="constrained"),
                         verifier=VerifierConfig(enabled=True), progress=False)
    out = label_records(RECS, cfg)
    assert [r.id for r in out] == [r.id for r in RECS]
    for src, r in zip(RECS, out):
        assert r.metadata["input_labels"] == src.labels and r.steps == src.steps
        for k, (lab, votes) in enumerate(zip(r.labels, r.votes)):
            if k in r.judge["vetoed_steps"]:
                assert lab == 0.0
            else:
                assert lab == pytest.approx(sum(votes) / len(votes)) and len(votes) in (3, 4)
