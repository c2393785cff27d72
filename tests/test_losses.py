import math

import pytest
import torch

from prm_distill.records import Trajectory
from prm_distill.train.config import LossConfig
from prm_distill.train.data import build_rows, class_weights
from prm_distill.train.losses import pairwise_ranking, soft_cross_entropy, step_loss


def test_soft_cross_entropy_by_hand_and_minimised_at_the_soft_label():
    # equal logits -> p = 0.5; target 0.5 -> ln 2
    assert soft_cross_entropy(torch.zeros(1, 2), torch.tensor([0.5])).item() == pytest.approx(math.log(2))
    # the gradient vanishes at p = target = 0.5: 0.5 trains toward 0.5, not toward a class
    logits = torch.zeros(1, 2, requires_grad=True)
    soft_cross_entropy(logits, torch.tensor([0.5])).backward()
    assert logits.grad.abs().max().item() < 1e-7
    # weights: a weighted mean
    logits = torch.tensor([[0.0, 0.0], [0.0, math.log(3)]])  # p_good = 0.5 and 0.75
    got = soft_cross_entropy(logits, torch.tensor([1.0, 1.0]), torch.tensor([1.0, 3.0])).item()
    assert got == pytest.approx((math.log(2) + 3 * -math.log(0.75)) / 4)


def test_pairwise_logistic_and_margin_by_hand():
    logits = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 5.0]])  # s = 1, 0, 5
    targets = torch.tensor([1.0, 0.0, 0.0])
    groups = torch.tensor([7, 7, 8])  # step 2 is another question: never paired
    assert pairwise_ranking(logits, targets, groups).item() == pytest.approx(math.log(1 + math.exp(-1)))
    assert pairwise_ranking(logits, targets, groups, margin=2.0, form="margin").item() == pytest.approx(1.0)
    no_pairs = pairwise_ranking(logits, torch.tensor([1.0, 1.0, 1.0]), groups)
    assert no_pairs.item() == 0.0


def test_mix_is_the_weighted_sum():
    logits = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    batch = {"targets": torch.tensor([1.0, 0.0]), "weights": torch.ones(2), "groups": torch.tensor([1, 1])}
    ce = soft_cross_entropy(logits, batch["targets"], batch["weights"]).item()
    pair = math.log(1 + math.exp(-1))
    got = step_loss(logits, batch, LossConfig(kind="mix", pairwise_weight=0.25)).item()
    assert got == pytest.approx(0.75 * ce + 0.25 * pair)


def test_class_balance_gives_each_class_half_the_weight():
    recs = [Trajectory(id=str(i), question="Q", steps=["a", "b", "c", "d"], labels=[1.0, 1.0, 1.0, 0.0]) for i in range(2)]
    w_bad, w_good = class_weights(recs)
    assert w_bad * 2 == pytest.approx(w_good * 6)  # 2 bad steps carry what 6 good steps carry
    assert w_bad == pytest.approx(8 / 4) and w_good == pytest.approx(8 / 12)


def test_rows_keep_soft_labels_as_floats(smol_tokenizer):
    import copy

    from prm_distill.encoding import StepEncoder, ensure_step_tag

    tok = copy.deepcopy(smol_tokenizer)
    enc = StepEncoder(tok, ensure_step_tag(tok), max_length=128)
    rec = Trajectory(id="x", question="Q?", steps=["a b", "c d", "e f"], labels=[0.5, None, 0.0], votes=[[1.0, 0.0], [], [0.0, 0.0, 0.0]])
    rows, stats = build_rows([rec], enc, LossConfig(class_balance=False, agreement_weights=True))
    (row,) = rows
    assert row.targets == [0.5, 0.0] and row.window.step_indices == [0, 2]
    assert row.weights == [0.5, 1.0]  # agreement 1/2 and 3/3
    assert stats["supervised_steps"] == 2


def test_group_by_length_batches_similar_lengths_and_keeps_every_row():
    from prm_distill.encoding import Window
    from prm_distill.train.data import Row, group_by_length

    rows = [Row(Window([0] * n, [n - 1], [0]), [1.0], [1.0], 0) for n in [5, 50, 6, 51, 7, 52, 8, 53]]
    batches = group_by_length(rows, batch_size=2, seed=0, megabatch=4)
    assert sorted(len(r.window.input_ids) for b in batches for r in b) == sorted(len(r.window.input_ids) for r in rows)
    for b in batches:  # short rows never share a batch with long ones
        lengths = [len(r.window.input_ids) for r in b]
        assert max(lengths) - min(lengths) <= 2
