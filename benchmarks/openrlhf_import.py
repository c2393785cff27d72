"""An OpenRLHF PRM scored here (`import-openrlhf`) versus its own reading, on a real 135M model.

The "OpenRLHF PRM" is SmolLM2-135M-Instruct (the embedded default, real weights) with the placeholder `ки` added
to its tokenizer, as train_prm needed, saved as a causal LM: its P(`+`) / (P(`+`) + P(`-`)) at each placeholder is
the untrained LM's, which is all this needs, since both readings must agree whatever the weights are. Two readings
of the same items, one after the other in one process:

- OpenRLHF's (and Math-Shepherd's model card's): each trajectory's Math-Shepherd text tokenised whole, one causal
  forward pass with the full vocabulary head, the softmax over the two reward tokens' logits at the placeholders;
- ours: the imported checkpoint (a two-class head from those two lm_head rows) through `PRMEngine.score`, batched.

Prints the largest difference between the two (it should be float noise: the import is exact), trajectories/s and
tokens/s of each and their ratio, with the load average. Items: ProcessBench GSM8K when ../shared is here, else the
embedded synthetic set.

    .venv/bin/python benchmarks/openrlhf_import.py [--limit 100] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PROCESSBENCH = ROOT.parent / "shared" / "data" / "processbench" / "gsm8k.json"


def items(limit: int) -> tuple[list[tuple[str, list[str]]], str]:
    if PROCESSBENCH.is_file():
        rows = json.loads(PROCESSBENCH.read_text(encoding="utf-8"))[:limit]
        return [(r["problem"], list(r["steps"])) for r in rows], f"ProcessBench GSM8K, first {len(rows)}"
    from prm_distill.synthetic import SyntheticConfig, generate

    return [(t.question, t.steps) for t in generate(SyntheticConfig(n=limit, seed=0))], f"synthetic, {limit}"


def openrlhf_model(out: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prm_distill.backbones import resolve_backbone

    src = resolve_backbone("smollm2")
    tok = AutoTokenizer.from_pretrained(src)
    tok.add_tokens(["ки"])
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    model.resize_token_embeddings(len(tok))
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def causal_reading(model_dir: Path, data: list[tuple[str, list[str]]]) -> tuple[list[list[float]], int, float]:
    """OpenRLHF's reading, one trajectory per forward pass; (scores, tokens, seconds)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    place, plus, minus = (tok.encode(t, add_special_tokens=False)[0] for t in ("ки", "+", "-"))
    out, tokens, start = [], 0, time.perf_counter()
    with torch.inference_mode():
        for question, steps in data:
            text = question + " " + "\n".join(f"Step {n}: {s} ки" for n, s in enumerate(steps, 1))
            ids = tok(text, add_special_tokens=False)["input_ids"]
            positions = [i for i, t in enumerate(ids) if t == place]
            logits = model(input_ids=torch.tensor([ids])).logits[0, positions]
            out.append(logits[:, [plus, minus]].softmax(-1)[:, 0].tolist())
            tokens += len(ids)
    return out, tokens, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=100, help="trajectories")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from prm_distill.import_openrlhf import import_openrlhf
    from prm_distill.serve.engine import PRMEngine

    data, what = items(args.limit)
    with tempfile.TemporaryDirectory() as tmp:
        src = openrlhf_model(Path(tmp) / "openrlhf")
        t0 = time.perf_counter()
        import_openrlhf(src, Path(tmp) / "imported", max_length=4096)
        import_s = time.perf_counter() - t0
        want, tokens, causal_s = causal_reading(src, data)
        engine = PRMEngine.from_checkpoint(Path(tmp) / "imported", device="cpu", verifier=False)
        engine.score(data[:2])  # warm-up, as the causal reading's first pass is not timed apart either
        t0 = time.perf_counter()
        got = engine.score(data)
        ours_s = time.perf_counter() - t0
    worst = max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w))
    spread = max(abs(s - 0.5) for w in want for s in w)
    print(f"items: {what}; {sum(len(s) for _, s in data)} steps, {tokens} tokens; threads {args.threads}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"import: {import_s:.1f} s; largest |P(good) ours - OpenRLHF's| {worst:.2e} (P(good) spread up to {spread:.3f} from 0.5)")
    print(f"OpenRLHF's reading (full vocabulary head, one trajectory a pass): {len(data) / causal_s:.2f} trajectories/s, {tokens / causal_s:.0f} tokens/s")
    print(f"ours (two-class head, PRMEngine batched):                         {len(data) / ours_s:.2f} trajectories/s, {tokens / ours_s:.0f} tokens/s")
    print(f"ratio ours / OpenRLHF's: {causal_s / ours_s:.2f}x")


if __name__ == "__main__":
    main()
