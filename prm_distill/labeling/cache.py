"""Append-only response cache: a judge is never paid twice for the same sampled answer.

Keyed by (judge, prompt version, prompt, sampling params, vote index). Each answer is appended and
fsynced the moment it arrives (`jobfiles.AppendLog`), so a killed job keeps everything answered
before the kill; a torn last line (the kill landed mid-write) is cut off on the next open.
"""

from __future__ import annotations

import hashlib
import json
import os

from ..jobfiles import AppendLog
from .judges.base import Completion, Request


def cache_key(judge: str, req: Request, vote: int) -> str:
    blob = json.dumps(
        {"judge": judge, "version": req.prompt.version, "messages": req.prompt.messages, "sampling": req.sampling(), "vote": vote},
        sort_keys=True, ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """`path=None` keeps answers in memory only (one in-process labeling call); else an `AppendLog`."""

    def __init__(self, path: str | os.PathLike | None):
        self.entries: dict[str, Completion] = {}
        self._log = AppendLog(path) if path is not None else None
        for d in self._log.rows if self._log is not None else []:
            self.entries[d["key"]] = Completion(d["text"], d["tokens_in"], d["tokens_out"], d["latency_s"])

    def get(self, key: str) -> Completion | None:
        return self.entries.get(key)

    def put(self, key: str, c: Completion) -> None:
        self.entries[key] = c
        if self._log is not None:
            self._log.append([{"key": key, "text": c.text, "tokens_in": c.tokens_in, "tokens_out": c.tokens_out, "latency_s": round(c.latency_s, 4)}])

    def __len__(self) -> int:
        return len(self.entries)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
