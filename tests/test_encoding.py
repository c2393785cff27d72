import pytest
import torch

from prm_distill.encoding import QUESTION_SUFFIX, EncodingError, StepEncoder, ensure_step_tag
from prm_distill.inference import score_encoded
from prm_distill.records import Trajectory
from prm_distill.train.config import LossConfig
from prm_distill.train.data import build_rows


@pytest.fixture
def tok(smol_tokenizer):
    import copy

    return copy.deepcopy(smol_tokenizer)


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_step_tag_is_exactly_one_token_added_when_missing(tok):
    n = len(tok)
    tag = ensure_step_tag(tok, "<|step|>")
    assert len(tok) == n + 1 and tok.encode("<|step|>", add_special_tokens=False) == [tag]
    # in the middle of text it stays one token and does not merge with its neighbours
    assert tag in tok.encode("abc<|step|>def", add_special_tokens=False)
    assert ensure_step_tag(tok, "<|step|>") == tag and len(tok) == n + 1


def test_encoding_concatenates_separately_tokenised_parts(tok):
    tag = ensure_step_tag(tok)
    enc = StepEncoder(tok, tag, max_length=512).encode("What is 2+3?", ["2+3=5.", "So 5."])
    (w,) = enc.windows
    q, s1, s2 = ids(tok, "What is 2+3?" + QUESTION_SUFFIX), ids(tok, "2+3=5."), ids(tok, "So 5.")
    assert w.input_ids == q + s1 + [tag] + s2 + [tag]
    assert w.tag_positions == [len(q) + len(s1), len(q) + len(s1) + 1 + len(s2)]
    assert w.step_indices == [0, 1] and not enc.truncated


def test_training_and_inference_ids_identical_across_a_bpe_merging_boundary(tok):
    """Joining "We add 2 and 3 first, " + "then ..." re-tokenises the boundary (" then" becomes one
    token); training rows and the engine both take the encoder's ids, which keep the parts apart."""
    tag = ensure_step_tag(tok)
    question, steps = "Add them up", ["We add 2 and 3 first, ", "then 5 remains."]
    joined = ids(tok, question + QUESTION_SUFFIX + steps[0] + steps[1])
    separate = ids(tok, question + QUESTION_SUFFIX) + ids(tok, steps[0]) + ids(tok, steps[1])
    assert joined != separate  # the boundary really merges when strings are joined

    encoder = StepEncoder(tok, tag, max_length=512)
    rows, _ = build_rows([Trajectory(id="x", question=question, steps=steps, labels=[1.0, 0.0])], encoder, LossConfig())
    (w,) = encoder.encode(question, steps).windows
    assert rows[0].window.input_ids == w.input_ids
    assert [t for t in w.input_ids if t != tag] == separate


def test_one_forward_pass_equals_scoring_each_prefix(tok, tiny_backbone):
    from transformers import AutoModelForTokenClassification

    tag = ensure_step_tag(tok)
    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_pretrained(tiny_backbone, num_labels=2)
    model.resize_token_embeddings(len(tok))
    model.eval()
    enc = StepEncoder(tok, tag, max_length=512)
    q = "Mia has 3 apples and buys 4 more. How many?"
    steps = ["Mia starts with 3 apples.", "She buys 4 more, so 3 + 4 = 7.", "The answer is 7.", "Done, 7 apples."]
    one_pass = score_encoded(model, [enc.encode(q, steps)], pad_id=0)[0]
    prefixes = [score_encoded(model, [enc.encode(q, steps[: k + 1])], pad_id=0)[0][-1] for k in range(len(steps))]
    assert len(set(round(p, 6) for p in one_pass)) > 1  # a random head gives distinct scores
    assert max(abs(a - b) for a, b in zip(one_pass, prefixes)) < 1e-5
    # batching with padding (other, longer items in the same batch) changes nothing either
    batched = score_encoded(model, [enc.encode(q, steps), enc.encode(q + " " + q, steps + steps)], pad_id=0)[0]
    assert max(abs(a - b) for a, b in zip(one_pass, batched)) < 1e-5


def test_long_trajectories_are_windowed_and_every_step_scored_once(tok):
    tag = ensure_step_tag(tok)
    enc = StepEncoder(tok, tag, max_length=64)
    steps = [f"Step {i}: we add {i} and {i} to get {2 * i} apples in all." for i in range(12)]
    out = enc.encode("How many apples in all?", steps)
    assert len(out.windows) > 1 and not out.truncated
    scored = [i for w in out.windows for i in w.step_indices]
    assert scored == list(range(12))
    q = ids(tok, "How many apples in all?" + QUESTION_SUFFIX)
    for w in out.windows:
        assert len(w.input_ids) <= 64
        assert w.input_ids[: len(q)] == q  # every window keeps the question
        assert all(w.input_ids[p] == tag for p in w.tag_positions)
        # the scored steps are preceded by the steps right before them (context), in order
        first = w.step_indices[0]
        if first > 0:
            prev = ids(tok, steps[first - 1]) + [tag]
            start = w.tag_positions[0] - len(ids(tok, steps[first]))
            assert w.input_ids[start - len(prev) : start] == prev


def test_oversized_question_and_step_are_truncated_not_dropped(tok):
    tag = ensure_step_tag(tok)
    enc = StepEncoder(tok, tag, max_length=40, max_question_tokens=10)
    out = enc.encode("word " * 50, ["short step", "long " * 100, "end"])
    assert out.truncated and [i for w in out.windows for i in w.step_indices] == [0, 1, 2]
    assert all(len(w.input_ids) <= 40 for w in out.windows)
    long_window = next(w for w in out.windows if 1 in w.step_indices)
    assert long_window.input_ids[-1] == tag or tag in long_window.input_ids


@pytest.mark.parametrize("question, steps, msg", [("", ["a"], "question"), ("Q", [], "at least one step"), ("Q", ["a", " "], "step 1 is empty")])
def test_bad_inputs_raise_clear_errors(tok, question, steps, msg):
    enc = StepEncoder(tok, ensure_step_tag(tok), max_length=64)
    with pytest.raises(EncodingError, match=msg):
        enc.encode(question, steps)


def test_unusable_tokenizer_is_rejected():
    class Broken:
        def __call__(self, *a, **k):
            raise RuntimeError("no vocab")

    with pytest.raises(EncodingError, match="cannot encode"):
        StepEncoder(Broken(), 5, max_length=64)
