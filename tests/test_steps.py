import pytest

from prm_distill.steps import SplitConfig, StepSplitError, split_step_spans, split_steps


def test_explicit_step_markers_win_and_keep_a_preamble():
    text = "Let us solve it carefully.\nStep 1: add 3 and 4 to get 7.\nStep 2: double it to get 14.\n## Step 3: The answer is 14."
    assert split_steps(text) == [
        "Let us solve it carefully.",
        "Step 1: add 3 and 4 to get 7.",
        "Step 2: double it to get 14.",
        "## Step 3: The answer is 14.",
    ]


def test_numbered_lists():
    text = "1. We first add the two numbers.\n2) Then we multiply 3 by 4 here.\n3. So the result is 12 in total."
    assert split_steps(text) == ["1. We first add the two numbers.", "2) Then we multiply 3 by 4 here.", "3. So the result is 12 in total."]


def test_blank_lines():
    assert split_steps("We compute 3+4=7 first.\n\n\nThen 7*2=14 follows.\n \nSo the answer is 14.") == [
        "We compute 3+4=7 first.", "Then 7*2=14 follows.", "So the answer is 14."]


def test_sentence_groups_do_not_split_decimals():
    text = "We have 7.8 minutes in all. That is 7 and 0.8 minutes. So 60 x 7.8 = 468. The answer is 468 seconds."
    assert split_steps(text, SplitConfig(sentences_per_step=2)) == [
        "We have 7.8 minutes in all. That is 7 and 0.8 minutes.", "So 60 x 7.8 = 468. The answer is 468 seconds."]
    assert len(split_steps(text, SplitConfig(sentences_per_step=1))) == 4


def test_code_blocks_stay_whole():
    code = "```python\nx = 1\n\ny = 2\nprint(x + y)\n```"
    steps = split_steps(f"Here is the program we need.\n\n{code}\n\nThe program prints 3.")
    assert steps == ["Here is the program we need.", code, "The program prints 3."]
    # even when longer than max_chars, a code block is never cut
    assert code in split_steps(f"Intro sentence here.\n\n{code}", SplitConfig(min_chars=1, max_chars=10))


def test_short_fragments_merge_into_a_neighbour():
    assert split_steps("Ok.\n\nWe compute 3+4=7 here.\n\nDone.") == ["Ok.\n\nWe compute 3+4=7 here.\n\nDone."]
    assert split_steps("We compute 3+4=7 here.\n\nDone.\n\nThen we stop there.") == ["We compute 3+4=7 here.\n\nDone.", "Then we stop there."]


def test_overlong_blocks_split_at_sentences_then_words():
    cfg = SplitConfig(min_chars=1, max_chars=40, sentences_per_step=3)
    text = "This is sentence number one. This is sentence number two. And three."
    steps = split_steps(text, cfg)
    assert steps == ["This is sentence number one.", "This is sentence number two. And three."]
    assert all(len(s) <= 40 for s in split_steps("word " * 30, cfg))
    assert " ".join(split_steps("word " * 30, cfg)) == ("word " * 30).strip()


def test_spans_index_the_original_text():
    text = "  Step 1: a = 2.\n\nStep 2: b = a + 1 = 3.  "
    spans = split_step_spans(text)
    assert [text[s:e] for s, e in spans] == ["Step 1: a = 2.", "Step 2: b = a + 1 = 3."]
    assert spans[0][0] == 2


@pytest.mark.parametrize("text", ["", "   \n\n "])
def test_empty_text_is_an_error(text):
    with pytest.raises(StepSplitError, match="empty"):
        split_steps(text)


def test_bad_bounds_are_rejected():
    with pytest.raises(ValueError, match="min_chars"):
        SplitConfig(min_chars=50, max_chars=40)


def test_paragraphs_before_the_first_marker_are_steps_of_their_own():
    """The preamble is cut as an unmarked response is (numbered items, else blank lines), never glued
    into one step; the marked steps keep their own paragraphs, and a step-1 marker at the very start
    is no preamble."""
    text = ("Let me read the problem first.\n\nWe need the apples in total.\n\n"
            "Step 1: Mia has 3 + 4 = 7 apples.\n\nShe keeps all of them.\nStep 2: The answer is 7.")
    assert split_steps(text) == ["Let me read the problem first.", "We need the apples in total.",
                                 "Step 1: Mia has 3 + 4 = 7 apples.\n\nShe keeps all of them.", "Step 2: The answer is 7."]
    listed = "1. Read the question well.\n2. Plan the sums to do.\n3. Check the result.\nStep 1: 3 + 4 = 7 apples.\nStep 2: The answer is 7."
    assert split_steps(listed)[:3] == ["1. Read the question well.", "2. Plan the sums to do.", "3. Check the result."]
    assert split_steps("Step 1: Mia has 3 + 4 = 7 apples.\n\nShe keeps all of them.\nStep 2: The answer is 7.") == [
        "Step 1: Mia has 3 + 4 = 7 apples.\n\nShe keeps all of them.", "Step 2: The answer is 7."]
    # one sentence-rich paragraph stays one step (marked steps are not cut at sentences either); short ones still merge
    assert split_steps("We read it. We plan it. We do it.\nStep 1: 3 + 4 = 7 apples.\nStep 2: The answer is 7.")[0] == "We read it. We plan it. We do it."
    assert split_steps("Ok.\n\nStep 1: 3 + 4 = 7 apples.\nStep 2: The answer is 7.")[0] == "Ok.\n\nStep 1: 3 + 4 = 7 apples."
    spans = split_step_spans(text)
    assert [text[s:e] for s, e in spans] == split_steps(text)  # spans still index the original text
