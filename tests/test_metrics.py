import math

import numpy as np
import pytest

from prm_distill.metrics import (
    best_threshold,
    expected_calibration_error,
    final_step_profile,
    first_below,
    paired_auroc_difference,
    position_profile,
    processbench_f1,
    report,
    step_accuracy,
    step_auroc,
)


def test_auroc_counts_correctly_ordered_pairs():
    # positives {0.9, 0.4}, negatives {0.5, 0.3}: 3 of 4 pairs ordered -> 0.75
    assert step_auroc([[0.9, 0.5], [0.4, 0.3]], [[1.0, 0.0], [1.0, 0.0]]) == pytest.approx(0.75)
    # unsupervised steps and soft 0.5 labels are left out
    assert step_auroc([[0.9, 0.1, 0.99], [0.2]], [[1.0, 0.0, None], [0.5]]) == pytest.approx(1.0)
    assert math.isnan(step_auroc([[0.9]], [[1.0]]))


def test_step_accuracy_at_threshold():
    # predictions >= 0.5 good: [T, F, T] vs labels [good, bad, bad] -> 2/3
    assert step_accuracy([[0.7, 0.2, 0.6]], [[1.0, 0.0, 0.0]]) == pytest.approx(2 / 3)


def test_ece_by_hand():
    # bin 1 holds 0.1 and 0.15 (mean 0.125) with labels 0 and 1 (mean 0.5): 2/3 * 0.375 = 0.25
    # bin 9 holds 0.9 with label 1: 1/3 * 0.1; total 0.28333
    assert expected_calibration_error([[0.1, 0.15, 0.9]], [[0.0, 1.0, 1.0]]) == pytest.approx(0.25 + 0.1 / 3)
    assert expected_calibration_error([[0.5, 0.5]], [[0.5, 0.5]]) == pytest.approx(0.0)


def test_processbench_f1_by_hand():
    scores = [[0.9, 0.2, 0.8], [0.9, 0.9], [0.3, 0.9], [0.9, 0.9, 0.1]]
    first_errors = [1, -1, -1, 2]
    assert first_below(scores[0], 0.5) == 1
    out = processbench_f1(scores, first_errors, 0.5)
    # erroneous: item 0 predicted 1 (hit), item 3 predicted 2 (hit) -> 1.0; correct: item 1 hit, item 2 miss -> 0.5
    assert out["acc_erroneous"] == 1.0 and out["acc_correct"] == 0.5
    assert out["processbench_f1"] == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert math.isnan(processbench_f1([[0.9]], [-1], 0.5)["processbench_f1"])


def test_best_threshold_maximises_f1_on_dev_items():
    scores = [[0.9, 0.45], [0.9, 0.6], [0.7, 0.8]]
    errors = [1, -1, -1]
    t = best_threshold(scores, errors)
    assert 0.45 < t <= 0.6
    assert processbench_f1(scores, errors, t)["processbench_f1"] == 1.0


def test_report_has_every_key():
    rep = report([[0.9, 0.2]], [[1.0, 0.0]], [1], 0.5)
    assert set(rep) >= {"processbench_f1", "acc_erroneous", "acc_correct", "threshold", "auroc", "step_accuracy", "ece", "mean_score", "n_items", "n_steps"}
    assert rep["n_steps"] == 2 and rep["mean_score"] == pytest.approx(0.55)


def test_report_decides_step_accuracy_and_f1_at_the_same_threshold():
    # scores 0.6 and 0.4 on a good and a bad step: at 0.5 both right, at 0.7 the good step is called bad
    scores, labels = [[0.6, 0.4]], [[1.0, 0.0]]
    assert report(scores, labels, [1], 0.5)["step_accuracy"] == 1.0
    assert report(scores, labels, [1], 0.5)["acc_erroneous"] == 1.0
    rep = report(scores, labels, [1], 0.7)
    assert rep["threshold"] == 0.7 and rep["step_accuracy"] == 0.5
    assert rep["acc_erroneous"] == 0.0  # at 0.7 the first step below is step 0, the error is at step 1


def test_paired_auroc_difference_by_hand_and_its_bootstrap_interval():
    labels = [[1, 1, 0], [1, 0], [1, 1]]
    perfect = [[0.9, 0.8, 0.1], [0.7, 0.2], [0.6, 0.95]]
    inverted = [[1 - s for s in item] for item in perfect]
    # a ranks every good step above every bad one (AUROC 1), b ranks every bad one above (AUROC 0)
    d = paired_auroc_difference(perfect, inverted, labels, n_boot=200)
    assert d["difference"] == 1.0 and d["low"] == 1.0 and d["high"] == 1.0
    # resamples with one class only (the third item alone) are left out, not counted as 0
    assert 0 < d["n_boot"] < 200
    same = paired_auroc_difference(perfect, perfect, labels, n_boot=50)
    assert same["difference"] == 0.0 and same["low"] == 0.0 and same["high"] == 0.0
    # 5 good and 2 bad steps: b puts the bad step 0.75 above the good 0.6 and 0.7 -> 2 of 10 pairs wrong
    b = [[0.9, 0.8, 0.1], [0.7, 0.75], [0.6, 0.95]]
    assert paired_auroc_difference(perfect, b, labels, n_boot=10)["difference"] == pytest.approx(1 - 0.8)
    with pytest.raises(ValueError, match="same items"):
        paired_auroc_difference(perfect, perfect[:2], labels)


def test_paired_auroc_difference_resamples_whole_problems_when_grouped():
    labels = [[1, 1, 0], [1, 0], [1, 1]]
    perfect = [[0.9, 0.8, 0.1], [0.7, 0.2], [0.6, 0.95]]
    b = [[0.9, 0.8, 0.1], [0.7, 0.75], [0.6, 0.95]]
    # one problem holds every item: each resample is the whole set, so the interval is the point, 1 - 0.8
    one = paired_auroc_difference(perfect, b, labels, groups=["p", "p", "p"], n_boot=20)
    assert one["n_groups"] == 1 and one["n_boot"] == 20
    assert one["low"] == pytest.approx(0.2) and one["high"] == pytest.approx(0.2) and one["difference"] == pytest.approx(0.2)
    # a group per item is the ungrouped bootstrap, draw for draw
    assert paired_auroc_difference(perfect, b, labels, groups=["x", "y", "z"], n_boot=50) == \
        paired_auroc_difference(perfect, b, labels, n_boot=50)
    with pytest.raises(ValueError, match="one group per item: 2 for 3 items"):
        paired_auroc_difference(perfect, b, labels, groups=["p", "q"])


def test_bootstrap_draws_are_the_aurocs_of_the_resampled_items_themselves():
    # the definition, spelled out: draw whole problems with replacement, concatenate their items, take
    # each scorer's step AUROC of that list with scikit-learn; ties (scores on a 0.1 grid), 0.5 and
    # unlabelled steps included. The interval must be that of these draws (the same seed, the same draws).
    import random as _random

    r = _random.Random(7)
    labels = [[r.choice([1, 1, 0, 0.5, None]) for _ in range(r.randint(1, 5))] for _ in range(30)]
    a = [[round(r.random(), 1) for _ in item] for item in labels]
    b = [[round(r.random(), 1) for _ in item] for item in labels]
    problems = [i % 8 for i in range(30)]
    clusters = [[i for i in range(30) if problems[i] == g] for g in range(8)]
    rng, draws = np.random.default_rng(5), []
    for _ in range(300):
        idx = [i for c in rng.integers(0, 8, 8) for i in clusters[c]]
        d = step_auroc([a[i] for i in idx], [labels[i] for i in idx]) - step_auroc([b[i] for i in idx], [labels[i] for i in idx])
        if not np.isnan(d):
            draws.append(d)
    got = paired_auroc_difference(a, b, labels, groups=problems, n_boot=300, seed=5)
    assert got["n_boot"] == len(draws) and got["n_groups"] == 8
    assert got["difference"] == pytest.approx(step_auroc(a, labels) - step_auroc(b, labels))
    assert [got["low"], got["high"]] == pytest.approx(list(np.quantile(draws, [0.025, 0.975])), abs=1e-12)


def test_grouped_interval_is_as_wide_as_the_problems_allow():
    # 4 problems x 10 copies of one solution (good step, bad step). a ranks both problems P0 and P1 right
    # and b ranks them wrong; on P2 and P3 the reverse. By records, each resample of 40 keeps near 20 of each
    # kind; by problem, a resample of 4 problems is often 3-to-1 or 4-to-0, so its interval must be wider.
    labels = [[1, 0]] * 40
    right, wrong = [0.9, 0.1], [0.1, 0.9]
    a = [right if i < 20 else wrong for i in range(40)]
    b = [wrong if i < 20 else right for i in range(40)]
    problems = [i // 10 for i in range(40)]
    by_record = paired_auroc_difference(a, b, labels, n_boot=400)
    by_problem = paired_auroc_difference(a, b, labels, groups=problems, n_boot=400)
    assert by_record["difference"] == by_problem["difference"] == 0.0
    assert by_problem["n_groups"] == 4 and by_record["n_groups"] == 40
    assert by_problem["high"] - by_problem["low"] > 2 * (by_record["high"] - by_record["low"])


def test_f1_on_the_grid_is_processbench_f1_at_each_threshold():
    # the vectorised scan must agree with the definition (first step below t, else -1) everywhere
    import random as _random

    import numpy as np

    from prm_distill.metrics import THRESHOLD_GRID, _f1_on_grid

    rng = _random.Random(3)
    scores = [[rng.random() for _ in range(rng.randint(1, 6))] for _ in range(40)]
    errors = [rng.choice([-1, *range(len(ss))]) for ss in scores]
    fast = _f1_on_grid(scores, errors, np.asarray(THRESHOLD_GRID))
    for t, f in zip(THRESHOLD_GRID[::16], fast[::16]):
        assert f == pytest.approx(processbench_f1(scores, errors, t)["processbench_f1"])


def test_best_threshold_takes_the_middle_of_the_best_plateau():
    # every t in (0.2, 0.8] gives F1 = 1 (the bad step scores 0.2, the lowest good one 0.8): the
    # middle of that plateau is 0.5 in logit space, not an edge that float noise could move
    scores = [[0.9, 0.2], [0.8, 0.95]]
    errors = [1, -1]
    t = best_threshold(scores, errors)
    assert abs(t - 0.5) < 0.01
    # scores moved by 1e-4 (bf16 vs fp32 noise): the plateau's edges move, its middle barely does
    noisy = [[s + 1e-4 for s in ss] for ss in scores]
    assert abs(best_threshold(noisy, errors) - t) < 0.01


def test_best_threshold_is_one_half_when_f1_is_undefined():
    # dev items of one class (no all-correct item): F1 is undefined at every threshold
    assert best_threshold([[0.9, 0.1], [0.3]], [1, 0]) == 0.5


def test_position_profile_means_good_and_bad_steps_by_position_pooling_the_tail():
    scores = [[0.9, 0.2, 0.7], [0.8, 0.6, 0.1, 0.5, 0.3]]
    labels = [[1.0, 0.0, None], [1.0, 1.0, 0.0, 0.5, 0.0]]
    rows = position_profile(scores, labels, last=2)
    assert [r["position"] for r in rows] == [0, 1, 2]
    # position 0: good 0.9 and 0.8 -> 0.85; no bad step
    assert (rows[0]["n_good"], rows[0]["n_bad"]) == (2, 0)
    assert rows[0]["mean_good"] == pytest.approx(0.85) and math.isnan(rows[0]["mean_bad"])
    # position 1: good 0.6, bad 0.2
    assert rows[1]["mean_good"] == pytest.approx(0.6) and rows[1]["mean_bad"] == pytest.approx(0.2)
    # positions >= 2 pooled: bad 0.1 (pos 2) and 0.3 (pos 4); the unlabelled 0.7 and the soft 0.5 are left out
    assert (rows[2]["n_good"], rows[2]["n_bad"]) == (0, 2)
    assert rows[2]["mean_bad"] == pytest.approx(0.2) and math.isnan(rows[2]["mean_good"])
    # a record without labels counts nowhere
    assert position_profile([[0.4]], [None], last=0)[0]["n_good"] == 0


def test_final_step_profile_splits_each_items_last_step_from_its_earlier_ones():
    scores = [[0.9, 0.4], [0.8, 0.7, 0.2], [0.6, 0.3], [0.5], [0.1, 0.35, 0.05]]
    labels = [[1.0, 1.0], [1.0, 1.0, 0.0], [1.0, None], None, [0.0, 0.5, 0.0]]
    prof = final_step_profile(scores, labels)
    # final steps: good 0.4; bad 0.2 and 0.05; an unlabelled last step (0.3) and a record without labels count nowhere
    assert (prof["final"]["n_good"], prof["final"]["n_bad"]) == (1, 2)
    assert prof["final"]["mean_good"] == pytest.approx(0.4) and prof["final"]["mean_bad"] == pytest.approx(0.125)
    # earlier steps: good 0.9, 0.8, 0.7, 0.6 -> 0.75; bad 0.1; the soft 0.35 is left out
    assert (prof["earlier"]["n_good"], prof["earlier"]["n_bad"]) == (4, 1)
    assert prof["earlier"]["mean_good"] == pytest.approx(0.75) and prof["earlier"]["mean_bad"] == pytest.approx(0.1)
    assert math.isnan(final_step_profile([[0.5]], [[1.0]])["earlier"]["mean_good"])


def test_final_step_profile_ranks_final_and_earlier_steps_apart():
    # final steps: good 0.2 against bad 0.3 and 0.6 -> no pair ranked right, AUROC 0;
    # earlier steps: good 0.9 and 0.5 against bad 0.4 -> both pairs right, AUROC 1;
    # pooled, good {0.9, 0.2, 0.5} against bad {0.3, 0.4, 0.6}: 3 + 0 + 2 of 9 pairs right
    scores = [[0.9, 0.2], [0.5, 0.3], [0.4, 0.6]]
    labels = [[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]]
    prof = final_step_profile(scores, labels)
    assert prof["final"]["auroc"] == pytest.approx(0.0) and prof["earlier"]["auroc"] == pytest.approx(1.0)
    assert step_auroc(scores, labels) == pytest.approx(5 / 9)
    # one class in a part: no AUROC there; an unlabelled item changes nothing
    one = final_step_profile([[0.9, 0.2], [0.5, 0.3]], [[1.0, 1.0], [1.0, None]])
    assert math.isnan(one["final"]["auroc"]) and math.isnan(one["earlier"]["auroc"])
    assert final_step_profile(scores + [[0.1]], labels + [None]) == prof
