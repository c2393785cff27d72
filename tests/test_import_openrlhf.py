"""`prm-distill import-openrlhf`: a PRM saved as OpenRLHF's train_prm saved it is scored here exactly as it scored.

The "OpenRLHF checkpoint" is a real `LlamaForCausalLM` (tiny, random, from a config) with SmolLM2's real tokenizer
holding the placeholder `ки` as an added token (OpenRLHF needed it to be one token), saved with `save_pretrained`.
The reference is what OpenRLHF's PRM read, written out here by hand: Math-Shepherd's text (`{question} Step 1:
{step} ки\\nStep 2: ...`) tokenised whole without special tokens, one causal forward pass, and at each token
equal to the placeholder's id the softmax over the logits of `+` and `-`, P(`+`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from prm_distill.checkpoint import CheckpointError, read_sidecar
from prm_distill.cli import main
from prm_distill.encoding import EncodingError, TextFormat
from prm_distill.import_openrlhf import import_openrlhf, read_text_format
from prm_distill.records import read_openrlhf
from prm_distill.serve.engine import PRMEngine

ITEMS = [
    ("Tom has 3 boxes of 4 pens. How many pens?", ["3 boxes x 4 pens = 12 pens.", "So he has\n12 pens.", "The answer is: 12"]),
    ("What is 10 - 7?", ["10 - 7 = 4.", "The answer is: 4"]),
]


def shepherd_text(question: str, steps: list[str]) -> str:
    return question + " " + "\n".join(f"Step {n}: {step} ки" for n, step in enumerate(steps, 1))


def make_openrlhf_model(tokenizer_dir: Path, path: Path, tied: bool, bos: bool = False) -> Path:
    """`bos`: the tokenizer adds BOS when asked for special tokens, as Llama's and Mistral's do (SmolLM2's does not)."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_tokens(["ки"])
    if bos:
        tok.backend_tokenizer.post_processor = TemplateProcessing(single=f"{tok.bos_token} $A", special_tokens=[(tok.bos_token, tok.bos_token_id)])
    torch.manual_seed(5)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=32, max_position_embeddings=1024, tie_word_embeddings=tied,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # the reward tokens' rows far from zero: P(+) spreads well away from 0.5
        for t in ("+", "-"):
            model.get_output_embeddings().weight[tok.convert_tokens_to_ids(t)].normal_(std=1.0)
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def openrlhf_model(request, tiny_backbone, tmp_path_factory) -> Path:
    return make_openrlhf_model(tiny_backbone, tmp_path_factory.mktemp("openrlhf") / "prm", tied=request.param)


def openrlhf_reference(model_dir: Path, text: str, special_tokens: bool = False) -> list[float]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ids = tok(text, add_special_tokens=special_tokens)["input_ids"]
    place, plus, minus = (tok.encode(t, add_special_tokens=False)[0] for t in ("ки", "+", "-"))
    positions = [i for i, t in enumerate(ids) if t == place]
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids])).logits[0, positions]
    return logits[:, [plus, minus]].softmax(-1)[:, 0].tolist()


def test_imported_scores_are_openrlhfs(openrlhf_model, tmp_path):
    out = tmp_path / "imported"
    sidecar = import_openrlhf(openrlhf_model, out)
    assert (sidecar.layout, sidecar.step_tag, sidecar.threshold) == ("openrlhf", "ки", None)
    assert read_sidecar(out).text_format == {"question": "{question} ", "step": "Step {n}: {step} ки", "joiner": "\n", "add_special_tokens": False}
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForTokenClassification"] and len(config["id2label"]) == 2
    got = PRMEngine.from_checkpoint(out, device="cpu").score(ITEMS)
    for (question, steps), scores in zip(ITEMS, got):
        assert scores == pytest.approx(openrlhf_reference(openrlhf_model, shepherd_text(question, steps)), abs=1e-5)
    assert max(abs(s - 0.5) for s in sum(got, [])) > 0.05  # not a comparison of constant scores
    assert len(got[0]) == 3  # a newline inside a step is not a step boundary


def test_rows_of_openrlhfs_data_are_scored_on_their_own_text(openrlhf_model, tmp_path):
    # a train_prm row read back (steps keep their "Step n:") is written out to the very text it was trained on
    text = "Ann reads 5 pages a day. How many in 3 days? Step 1: 5 x 3 = 15 pages. ки\nStep 2: The answer is: 15 ки"
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"input": text, "value": ["+", "-"]}) + "\n")
    record = read_openrlhf(rows)[0]
    out = tmp_path / "imported"
    import_openrlhf(openrlhf_model, out)
    got = PRMEngine.from_checkpoint(out, device="cpu").score([(record.question, record.steps)])[0]
    assert got == pytest.approx(openrlhf_reference(openrlhf_model, text), abs=1e-5)


def test_math_shepherds_own_reading_with_bos(tiny_backbone, tmp_path):
    # Math-Shepherd's published PRM is read with tokenizer.encode(text): BOS first where the tokenizer adds one
    model_dir = make_openrlhf_model(tiny_backbone, tmp_path / "prm", tied=False, bos=True)
    out = tmp_path / "imported"
    assert main(["import-openrlhf", "--model", str(model_dir), "--output", str(out), "--add-special-tokens"]) == 0
    engine = PRMEngine.from_checkpoint(out, device="cpu")
    question, steps = ITEMS[0]
    assert engine.encoder.encode(question, steps).windows[0].input_ids[0] == engine.encoder.tokenizer.bos_token_id
    want = openrlhf_reference(model_dir, shepherd_text(question, steps), special_tokens=True)
    assert engine.score([(question, steps)])[0] == pytest.approx(want, abs=1e-5)
    assert want != pytest.approx(openrlhf_reference(model_dir, shepherd_text(question, steps)), abs=1e-3)  # BOS changes the reading
    # windows: each one opens with BOS, and a question cut to its first tokens is still scored
    short = tmp_path / "short"
    import_openrlhf(model_dir, short, max_length=40, text_format=TextFormat(add_special_tokens=True))
    enc = PRMEngine.from_checkpoint(short, device="cpu").encoder.encode("How many? " * 30, [f"add {i}." for i in range(6)])
    assert enc.truncated and all(w.input_ids[0] == engine.encoder.tokenizer.bos_token_id and len(w.input_ids) <= 40 for w in enc.windows)
    assert sorted(i for w in enc.windows for i in w.step_indices) == list(range(6))


def test_windows_score_every_step_once_and_the_first_window_as_openrlhf(openrlhf_model, tmp_path):
    out = tmp_path / "short"
    import_openrlhf(openrlhf_model, out, max_length=48)
    question, steps = ITEMS[1][0], [f"add {i} to get {i * 3}." for i in range(8)]
    engine = PRMEngine.from_checkpoint(out, device="cpu")
    enc = engine.encoder.encode(question, steps)
    assert not enc.truncated and len(enc.windows) > 1 and all(len(w.input_ids) <= 48 for w in enc.windows)
    assert sorted(i for w in enc.windows for i in w.step_indices) == list(range(8))
    scores = engine.score([(question, steps)])[0]
    first = enc.windows[0].step_indices  # a causal model: the first window is the whole text's beginning
    assert [scores[i] for i in first] == pytest.approx(openrlhf_reference(openrlhf_model, shepherd_text(question, steps))[: len(first)], abs=1e-5)
    # a later window opens with the question, then earlier steps as context, numbered as in the whole text
    later = enc.windows[-1]
    text = engine.encoder.tokenizer.decode(later.input_ids)
    assert text.startswith(question + " Step ") and f"Step {later.step_indices[-1] + 1}: " in text
    # a step longer than a window keeps its last tokens and its placeholder, and is scored
    long = engine.encoder.encode(question, ["one " * 80 + "so 3.", "The answer is: 3"])
    assert long.truncated and sorted(i for w in long.windows for i in w.step_indices) == [0, 1]
    assert all(len(w.input_ids) <= 48 for w in long.windows)


def test_text_formats_number_steps_once_and_are_checked():
    fmt = TextFormat()
    assert fmt.step_text(2, "x = 3") == "Step 2: x = 3 ки"
    assert fmt.step_text(2, "Step 2: x = 3") == "Step 2: x = 3 ки"  # as read from OpenRLHF's rows: not numbered twice
    assert fmt.step_text(2, "Step 1: x = 3") == "Step 2: Step 1: x = 3 ки"  # another number is the step's own text
    plain = read_text_format("Q: {question}\\n", "{step} <s>", "\\n\\n")
    assert (plain.question_text("2+2?"), plain.step_text(1, "4"), plain.joiner) == ("Q: 2+2?\n", "4 <s>", "\n\n")
    for bad, why in [(TextFormat(question="no slot"), "{question} once"), (TextFormat(step="{step}"), "placeholder 'ки' once"),
                     (TextFormat(step="ки {step} ки"), "placeholder 'ки' once"), (TextFormat(step="Step {n}:"), "{step} once")]:
        with pytest.raises(EncodingError, match=why):
            bad.check("ки")


def test_cli_imports_with_a_dev_threshold_and_eval_reads_it(openrlhf_model, tmp_path, capsys):
    rows = [{"input": shepherd_text(q, s), "value": ["+"] * (len(s) - 1) + ["+" if k % 2 else "-"]} for k, (q, s) in enumerate(ITEMS * 3)]
    dev = tmp_path / "dev.jsonl"
    dev.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "imported"
    assert main(["import-openrlhf", "--model", str(openrlhf_model), "--output", str(out), "--dev", str(dev), "--dev-format", "openrlhf",
                 "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "layout openrlhf" in printed and "P('+') / (P('+') + P('-'))" in printed
    sidecar = read_sidecar(out)
    assert sidecar.threshold is not None and sidecar.threshold_source.startswith("dev (6 records)")
    report = tmp_path / "eval.json"
    assert main(["eval", "--model", str(out), "--data", str(dev), "--format", "openrlhf", "--output", str(report)]) == 0
    rep = json.loads(report.read_text())
    assert rep["n_steps"] == 15 and rep["threshold"] == pytest.approx(sidecar.threshold)


def test_what_import_refuses(openrlhf_model, tiny_backbone, tmp_path, capsys):
    from transformers import AutoModelForTokenClassification

    # a token classifier (what TRL saved) is not train_prm's causal LM
    classifier = tmp_path / "classifier"
    AutoModelForTokenClassification.from_pretrained(openrlhf_model, num_labels=2).save_pretrained(classifier)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (classifier / f).write_bytes((openrlhf_model / f).read_bytes())
    assert main(["import-openrlhf", "--model", str(classifier), "--output", str(tmp_path / "a")]) == 2
    assert "not a causal LM" in capsys.readouterr().err
    # a tokenizer that splits the placeholder: OpenRLHF could not have trained with it
    assert main(["import-openrlhf", "--model", str(tiny_backbone), "--output", str(tmp_path / "a")]) == 2
    assert "the placeholder 'ки' is 2 tokens" in capsys.readouterr().err
    # a placeholder that is one token alone but merges with its neighbours in the text: nothing would be read there
    assert main(["import-openrlhf", "--model", str(openrlhf_model), "--output", str(tmp_path / "a"), "--placeholder", "z",
                 "--step-format", "{step} z"]) == 2
    assert "merges it with the text around it" in capsys.readouterr().err
    # reward tokens must be two different ones, and the output new
    assert main(["import-openrlhf", "--model", str(openrlhf_model), "--output", str(tmp_path / "a"), "--reward-tokens", "+", "+"]) == 2
    assert "two different tokens" in capsys.readouterr().err
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    assert main(["import-openrlhf", "--model", str(openrlhf_model), "--output", str(taken)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err and [p.name for p in taken.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["classifier", "taken"]  # nothing left by a refused import


def test_text_the_placeholder_is_in_cannot_be_scored_and_a_bad_sidecar_is_refused(openrlhf_model, tmp_path):
    out = tmp_path / "imported"
    import_openrlhf(openrlhf_model, out)
    engine = PRMEngine.from_checkpoint(out, device="cpu")
    with pytest.raises(EncodingError, match="step 1 contains the placeholder 'ки'"):
        engine.encoder.encode("What is 1 + 1?", ["1 + 1 = 2.", "So 2 ки"])
    data = json.loads((out / "prm_distill.json").read_text())
    (out / "prm_distill.json").write_text(json.dumps({**data, "text_format": {**data["text_format"], "step": "Step {n}: {step}"}}))
    with pytest.raises(CheckpointError, match="text_format: the step format 'Step {n}: {step}' must hold the placeholder"):
        read_sidecar(out)


def test_training_an_imported_prm_goes_on_in_openrlhfs_encoding(openrlhf_model, synthetic_files, train_overrides, tmp_path):
    from prm_distill.config import load_config
    from prm_distill.train import TrainJobConfig, train
    from prm_distill.train.loop import setup

    imported = tmp_path / "imported"
    import_openrlhf(openrlhf_model, imported)
    out = tmp_path / "continued"
    cfg = load_config(TrainJobConfig, None, train_overrides(imported, synthetic_files, out, **{"optim.max_steps": 1, "optim.learning_rate": 0.0}))
    question, steps = ITEMS[0]
    assert setup(cfg).encoder.encode(question, steps) == PRMEngine.from_checkpoint(imported, device="cpu").encoder.encode(question, steps)
    train(cfg)
    sidecar = read_sidecar(out)
    assert (sidecar.layout, sidecar.step_tag, sidecar.text_format) == ("openrlhf", "ки", read_sidecar(imported).text_format)
    for (q, s), scores in zip(ITEMS, PRMEngine.from_checkpoint(out, device="cpu").score(ITEMS)):  # lr 0: OpenRLHF's scores still
        assert scores == pytest.approx(openrlhf_reference(openrlhf_model, shepherd_text(q, s)), abs=1e-5)


@pytest.mark.slow
def test_vllm_scores_an_imported_checkpoint_as_the_engine(tiny_backbone, tmp_path, vllm_offline_scores):
    # vLLM's STEP pooler reads the converted head at every placeholder of our windows' ids
    model = tmp_path / "imported"
    import_openrlhf(make_openrlhf_model(tiny_backbone, tmp_path / "prm", tied=False), model, max_length=64)
    items = ITEMS + [(ITEMS[1][0], [f"add {i} to get {i * 3}." for i in range(10)])]  # several windows
    expected = PRMEngine.from_checkpoint(model, device="cpu").score(items)
    got = vllm_offline_scores(model, items)
    assert [len(g) for g in got] == [len(e) for e in expected]
    assert max(abs(a - b) for g, e in zip(got, expected) for a, b in zip(g, e)) <= 1e-5
