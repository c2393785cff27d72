"""Serving: the in-process batched engine (HTTP server and vLLM backend build on it)."""

from .engine import PRMEngine

__all__ = ["PRMEngine"]
