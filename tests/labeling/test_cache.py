"""The response cache: every sampled answer is paid once, survives a crash mid-write, and is keyed
so that a different judge, prompt version, prompt, sampling setting or vote is a different answer."""

from __future__ import annotations

from dataclasses import replace

from prm_distill.labeling.cache import ResponseCache, cache_key
from prm_distill.labeling.judges.base import Completion, Request
from prm_distill.labeling.prompts import render

P = render("prefix", "What is 2 + 2?", ["2 + 2 = 4."], 0)
REQ = Request(P, seed=0, temperature=0.2, max_tokens=64)


def test_key_changes_with_every_part_it_is_made_of():
    base = cache_key("j", REQ, 0)
    variants = {
        cache_key("other", REQ, 0),
        cache_key("j", REQ, 1),
        cache_key("j", replace(REQ, seed=1), 0),
        cache_key("j", replace(REQ, temperature=0.3), 0),
        cache_key("j", replace(REQ, max_tokens=65), 0),
        cache_key("j", replace(REQ, prompt=replace(P, version="prefix.v2")), 0),
        cache_key("j", replace(REQ, prompt=render("prefix", "What is 2 + 3?", ["2 + 3 = 5."], 0)), 0),
    }
    assert base not in variants and len(variants) == 7
    assert cache_key("j", REQ, 0) == base


def test_answers_survive_reopening_and_a_torn_last_line_is_cut(tmp_path):
    path = tmp_path / "c" / "responses.jsonl"
    c = ResponseCache(path)
    c.put("a", Completion("Score: 1", 10, 3, 0.1))
    c.put("b", Completion("Score: 0", 11, 3, 0.2))
    c.close()
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"key": "c", "text": "Sco')  # killed mid-write
    c = ResponseCache(path)
    assert len(c) == 2 and c.get("a").text == "Score: 1" and c.get("c") is None
    c.put("c", Completion("Score: 0.5", 9, 3, 0.1))
    c.close()
    assert len(ResponseCache(path)) == 3
