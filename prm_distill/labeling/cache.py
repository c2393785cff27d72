"""Append-only response cache: a judge is never paid twice for the same sampled answer.

Keyed by (judge, prompt version, prompt, sampling params, vote index). Each answer is appended and
fsynced the moment it arrives, so a killed job keeps everything answered before the kill; a torn
last line (the kill landed mid-write) is cut off on the next open.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .judges.base import Completion, Request


def cache_key(judge: str, req: Request, vote: int) -> str:
    blob = json.dumps(
        {"judge": judge, "version": req.prompt.version, "messages": req.prompt.messages, "sampling": req.sampling(), "vote": vote},
        sort_keys=True, ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """`path=None` keeps answers in memory only (one in-process labeling call)."""

    def __init__(self, path: str | os.PathLike | None):
        self.entries: dict[str, Completion] = {}
        self._f = None
        if path is None:
            return
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        good_end = 0
        if self.path.exists():
            with open(self.path, "rb") as f:
                for line in f:
                    try:
                        d = json.loads(line)
                        if not line.endswith(b"\n"):
                            raise ValueError("torn line")
                    except ValueError:
                        break
                    self.entries[d["key"]] = Completion(d["text"], d["tokens_in"], d["tokens_out"], d["latency_s"])
                    good_end += len(line)
            if good_end < self.path.stat().st_size:
                os.truncate(self.path, good_end)
        self._f = open(self.path, "a", encoding="utf-8")

    def get(self, key: str) -> Completion | None:
        return self.entries.get(key)

    def put(self, key: str, c: Completion) -> None:
        self.entries[key] = c
        if self._f is None:
            return
        entry = {"key": key, "text": c.text, "tokens_in": c.tokens_in, "tokens_out": c.tokens_out, "latency_s": round(c.latency_s, 4)}
        self._f.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def __len__(self) -> int:
        return len(self.entries)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
