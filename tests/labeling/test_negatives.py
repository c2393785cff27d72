"""Hard negatives: padded copies (inserted redundant/wandering steps labelled 0, original labels
kept) and injected numeric errors (that step 0, later steps unsupervised), each with provenance
and the same choice every time for the same record id (so a resumed job makes the same ones)."""

from __future__ import annotations

from prm_distill.labeling.config import NegativesConfig
from prm_distill.labeling.judges.arithmetic import verify_steps
from prm_distill.labeling.negatives import hard_negatives, injected_error, padded
from prm_distill.records import Trajectory

R = Trajectory(id="r7", question="Mia has 3 apples and buys 4, then doubles them. How many?",
               steps=["Mia starts with 3 apples.", "She buys 4: 3 + 4 = 7 apples.", "Doubling: 7 x 2 = 14 apples.", "The answer is 14."],
               labels=[1.0, 1.0, 1.0, 1.0], votes=[[1.0, 1.0]] * 4, judge={"mode": "prefix", "prompt_version": "prefix.v1", "judges": ["j"]})


def test_padded_copy_labels_inserted_steps_zero_and_keeps_the_rest():
    cfg = NegativesConfig(max_inserted=2)
    p = padded(R, cfg)
    ins = p.metadata["hard_negative"]["inserted_steps"]
    assert p.id == "r7~padded" and p.metadata["hard_negative"]["source_id"] == "r7" and 1 <= len(ins) <= 2
    assert len(p.steps) == len(R.steps) + len(ins)
    assert [p.labels[k] for k in ins] == [0.0] * len(ins) and all(p.votes[k] == [] for k in ins)
    assert [s for k, s in enumerate(p.steps) if k not in ins] == R.steps
    assert [lab for k, lab in enumerate(p.labels) if k not in ins] == R.labels
    assert p.steps[0] == R.steps[0]  # never before the first step
    assert padded(R, cfg).steps == p.steps  # deterministic per id


def test_injected_error_changes_one_number_and_unsupervises_later_steps():
    e = injected_error(R, NegativesConfig())
    k = e.metadata["hard_negative"]["error_step"]
    assert e.id == "r7~injected_error"
    assert e.labels == R.labels[:k] + [0.0] + [None] * (len(R.steps) - k - 1)
    assert [s for i, s in enumerate(e.steps) if i != k] == [s for i, s in enumerate(R.steps) if i != k]
    old, new = e.metadata["hard_negative"]["changed"].split("->")
    assert old != new and e.steps[k] != R.steps[k]
    assert e.steps[k].replace(new, old, 1) == R.steps[k]


def test_rates_pick_records_and_steps_without_numbers_yield_no_error_copy():
    assert hard_negatives(R, NegativesConfig()) == []
    kinds = [n.metadata["hard_negative"]["kind"] for n in hard_negatives(R, NegativesConfig(padded_rate=1, error_rate=1))]
    assert kinds == ["padded", "injected_error"]
    words = Trajectory(id="w", question="Why?", steps=["Because.", "That is all."], labels=[1.0, 1.0])
    assert injected_error(words, NegativesConfig()) is None
    picked = sum(bool(hard_negatives(Trajectory(id=f"x{i}", question="q", steps=["a 1", "b 2"], labels=[1.0, 1.0]), NegativesConfig(padded_rate=0.3)))
                 for i in range(400))
    assert 80 <= picked <= 160  # 0.3 * 400 = 120, binomial sd about 9


def test_an_injected_error_in_an_equation_is_caught_by_the_verifier_most_of_the_time():
    caught = total = 0
    for i in range(60):
        r = Trajectory(id=f"e{i}", question=R.question, steps=R.steps, labels=R.labels)
        e = injected_error(r, NegativesConfig())
        k = e.metadata["hard_negative"]["error_step"]
        if "=" in e.steps[k]:
            total += 1
            caught += verify_steps([e.steps[k]])[0] == 0.0
    assert total > 10 and caught / total > 0.5
