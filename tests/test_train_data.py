"""train/data.py on its own: training rows per window (every supervised step once, in the window that
scores it), class and agreement weights computed by hand, length-grouped batches, and the collator."""

from __future__ import annotations

import copy

import pytest

from prm_distill.encoding import StepEncoder, ensure_step_tag
from prm_distill.records import Trajectory
from prm_distill.train.config import LossConfig
from prm_distill.train.data import Collator, build_rows, class_weights, group_by_length


@pytest.fixture(scope="module")
def encoder_of(smol_tokenizer):
    tok = copy.deepcopy(smol_tokenizer)  # the session tokenizer stays without the step tag
    tag = ensure_step_tag(tok)

    def make(max_length: int) -> StepEncoder:
        return StepEncoder(tok, tag, max_length)

    return make


def long_trajectory(n: int, labels) -> Trajectory:
    steps = [f"Step {k + 1}: we add {k} and {k + 2} to get {2 * k + 2}, which we keep for later." for k in range(n)]
    return Trajectory(id="long", question="Add the numbers one by one.", steps=steps, labels=labels)


def test_a_long_trajectory_gives_one_row_per_window_and_every_supervised_step_once(encoder_of):
    encoder = encoder_of(96)
    labels = [1.0, 0.0, None, 1.0, 0.5, None, 1.0, 0.0, 1.0, 1.0, None, 0.0]
    record = long_trajectory(len(labels), labels)
    windows = encoder.encode(record.question, record.steps).windows
    assert len(windows) > 2  # the trajectory really is cut into windows

    rows, stats = build_rows([record], encoder, LossConfig(class_balance=False))
    supervised = [k for k, lab in enumerate(labels) if lab is not None]
    scored = [s for row in rows for s in row.window.step_indices]
    assert sorted(scored) == supervised and len(scored) == len(set(scored))  # each supervised step once, none unlabelled
    assert stats["supervised_steps"] == len(supervised) and stats["rows"] == len(rows) <= len(windows)
    for row in rows:
        assert row.targets == [labels[s] for s in row.window.step_indices]  # soft labels stay floats (0.5 included)
        assert all(row.window.input_ids[p] == encoder.step_tag_id for p in row.window.tag_positions)
        assert len(row.window.input_ids) <= 96
    # a window made only of unlabelled steps is no row at all
    only_none = long_trajectory(3, [None, None, None])
    assert build_rows([only_none], encoder, LossConfig())[0] == []


def test_class_weights_give_each_class_half_the_loss():
    # 3 good and 1 bad steps count; 0.5 (undecided) and None (unsupervised) do not
    records = [Trajectory(id="a", question="Q?", steps=["a", "b", "c"], labels=[1.0, 1.0, None]),
               Trajectory(id="b", question="Q?", steps=["a", "b", "c"], labels=[0.0, 0.5, 0.9])]
    w_bad, w_good = class_weights(records)
    assert (w_bad, w_good) == pytest.approx((4 / 2, 4 / 6))  # total / (2 * count)
    assert 1 * w_bad == pytest.approx(3 * w_good)  # each class carries the same total weight
    only_good = [Trajectory(id="c", question="Q?", steps=["a"], labels=[1.0])]
    assert class_weights(only_good) == (1.0, 1.0)


def test_step_weights_mix_class_weights_by_the_soft_label_and_scale_by_vote_agreement(encoder_of):
    encoder = encoder_of(512)
    record = Trajectory(id="v", question="What is 2 + 2?", steps=["2 + 2 = 4.", "Then 4 + 1 = 6.", "So maybe 6."],
                        labels=[1.0, 0.0, 0.5], votes=[[1.0, 1.0, 1.0], [0.0, 0.0, 1.0], [0.0, 1.0]])
    w_bad, w_good = 2 / (2 * 1), 2 / (2 * 1)  # one good, one bad: both 1.0
    [row], stats = build_rows([record], encoder, LossConfig(class_balance=True, agreement_weights=True))
    assert (stats["weight_bad"], stats["weight_good"]) == (w_bad, w_good)
    # 0.5 is y * w_good + (1 - y) * w_bad; agreement = share of the majority vote: 1, 2/3, 1/2
    assert row.weights == pytest.approx([1.0 * 1.0, 1.0 * 2 / 3, 1.0 * 1 / 2])
    [plain], _ = build_rows([record], encoder, LossConfig(class_balance=False, agreement_weights=False))
    assert plain.weights == [1.0, 1.0, 1.0]

    unbalanced = [record, Trajectory(id="g", question="Q2?", steps=["1 + 1 = 2.", "2 + 2 = 4."], labels=[1.0, 1.0])]
    rows, stats = build_rows(unbalanced, encoder, LossConfig(class_balance=True))
    assert (stats["weight_bad"], stats["weight_good"]) == pytest.approx((4 / 2, 4 / 6))
    assert rows[0].weights == pytest.approx([4 / 6, 4 / 2, 0.5 * 4 / 6 + 0.5 * 4 / 2])
    assert rows[0].group != rows[1].group  # groups follow the question (pairwise pairs stay within one)


def test_group_by_length_batches_every_row_once_sorted_within_megabatches(encoder_of):
    encoder = encoder_of(512)
    records = [Trajectory(id=str(i), question=f"Question {i}?", steps=["word " * (1 + (7 * i) % 23)], labels=[1.0]) for i in range(40)]
    rows, _ = build_rows(records, encoder, LossConfig())
    batches = group_by_length(rows, batch_size=4, seed=3, megabatch=2)
    assert sorted(id(r) for b in batches for r in b) == sorted(id(r) for r in rows)
    assert all(1 <= len(b) <= 4 for b in batches)
    lengths = [[len(r.window.input_ids) for r in b] for b in batches]
    for start in range(0, len(batches), 2):  # one megabatch = 2 batches of 4 rows, sorted by length
        flat = [n for b in lengths[start : start + 2] for n in b]
        assert flat == sorted(flat)
    again = group_by_length(rows, batch_size=4, seed=3, megabatch=2)
    assert [[id(r) for r in b] for b in again] == [[id(r) for r in b] for b in batches]  # seeded
    other = group_by_length(rows, batch_size=4, seed=4, megabatch=2)
    assert [[id(r) for r in b] for b in other] != [[id(r) for r in b] for b in batches]


def test_the_collator_flattens_tags_targets_and_weights_over_the_batch(encoder_of):
    encoder = encoder_of(512)
    records = [Trajectory(id="a", question="Q one?", steps=["x = 1.", "y = 2."], labels=[1.0, 0.0]),
               Trajectory(id="b", question="Q two is longer?", steps=["z = 3."], labels=[0.5])]
    rows, _ = build_rows(records, encoder, LossConfig(class_balance=False))
    batch = Collator(pad_id=0)(rows)
    n0, n1 = (len(r.window.input_ids) for r in rows)
    assert batch["input_ids"].shape == (2, max(n0, n1)) and int(batch["n_tokens"]) == n0 + n1
    assert batch["attention_mask"].sum(dim=1).tolist() == [n0, n1]
    assert batch["tag_batch"].tolist() == [0, 0, 1]
    assert batch["tag_pos"].tolist() == rows[0].window.tag_positions + rows[1].window.tag_positions
    assert batch["targets"].tolist() == [1.0, 0.0, 0.5] and batch["weights"].tolist() == [1.0, 1.0, 1.0]
    assert Collator(pad_id=0, pregrouped=True)([rows])["tag_batch"].tolist() == [0, 0, 1]


def _records_file(path, n: int, prefix: str):
    from prm_distill.records import write_jsonl

    write_jsonl([Trajectory(id=f"{prefix}{i}", question=f"{prefix} question {i}?", steps=[f"step {i}."], labels=[1.0])
                 for i in range(n)], path)
    return str(path)


def test_data_mix_gives_each_file_its_share_of_the_stream(tmp_path):
    """10 + 2 records, mix [1, 1]: 12 records, 6 from each file; the small file's 2 records 3 times each."""
    from collections import Counter

    from prm_distill.train.config import DataConfig, TrainJobConfig
    from prm_distill.train.data import load_data

    big, small = _records_file(tmp_path / "big.jsonl", 10, "b"), _records_file(tmp_path / "small.jsonl", 2, "s")
    dev = _records_file(tmp_path / "dev.jsonl", 2, "d")
    train, _ = load_data(TrainJobConfig(data=DataConfig(train=[big, small], dev=[dev], mix=[1.0, 1.0])))
    counts = Counter(r.id for r in train)
    assert len(train) == 12 and sum(v for k, v in counts.items() if k.startswith("b")) == 6
    assert counts["s0"] == counts["s1"] == 3 and max(v for k, v in counts.items() if k.startswith("b")) == 1
    plain, _ = load_data(TrainJobConfig(data=DataConfig(train=[big, small], dev=[dev])))
    assert sorted(r.id for r in plain) == sorted([f"b{i}" for i in range(10)] + ["s0", "s1"])
    with pytest.raises(ValueError, match="2 data.train files"):
        load_data(TrainJobConfig(data=DataConfig(train=[big, small], dev=[dev], mix=[1.0])))


def test_each_file_may_name_its_own_format(tmp_path):
    """A TRL migrant's rows (trl:), OpenRLHF's (openrlhf:) and our records in one run: each read in its format,
    the rest in data.format; the run's identity digests the files themselves."""
    import json

    from prm_distill.records import file_and_format
    from prm_distill.train.config import DataConfig, TrainJobConfig
    from prm_distill.train.data import load_data
    from prm_distill.train.identity import file_digest, run_identity

    ours, dev = _records_file(tmp_path / "ours.jsonl", 2, "o"), _records_file(tmp_path / "dev.jsonl", 1, "d")
    trl = tmp_path / "trl.jsonl"
    trl.write_text(json.dumps({"prompt": "What is 2 + 2?", "completions": ["2 + 2 = 5.", "So 5."], "labels": [False, False]}) + "\n")
    shepherd = tmp_path / "shepherd.jsonl"
    shepherd.write_text(json.dumps({"input": "What is 3 x 3? Step 1: 3 x 3 = 9. ки\nStep 2: The answer is: 9 ки", "value": ["+", "+"]}) + "\n")
    cfg = TrainJobConfig(data=DataConfig(train=[ours, f"trl:{trl}", f"openrlhf:{shepherd}"], dev=[f"jsonl:{dev}"]))
    train, dev_records = load_data(cfg)
    by_question = {r.question: r for r in train}
    assert by_question["What is 2 + 2?"].labels == [0.0, 0.0] and by_question["What is 3 x 3?"].labels == [1.0, 1.0]
    assert by_question["What is 3 x 3?"].steps == ["Step 1: 3 x 3 = 9.", "Step 2: The answer is: 9"]
    assert len(train) == 4 and [r.id for r in dev_records] == ["d0"]
    assert run_identity(cfg)["data_files"][f"trl:{trl}"] == file_digest(trl)
    # a name that is no format is part of the path; a Windows drive is a path
    assert file_and_format("C:/data/x.jsonl", "trl") == ("C:/data/x.jsonl", "trl")
    assert file_and_format("notaformat:x.jsonl", "jsonl") == ("notaformat:x.jsonl", "jsonl")
    with pytest.raises(FileNotFoundError, match="prmbench:"):  # a file that is missing is named as given
        load_data(TrainJobConfig(data=DataConfig(train=[ours, f"trl:{tmp_path / 'prmbench:missing.jsonl'}"], dev=[dev])))
