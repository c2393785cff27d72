"""What this CPU is, read once from /proc/cpuinfo: the engine's dtype and kernel choices and the
fused runner's attention path depend on it."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def _cpuinfo() -> tuple[str | None, frozenset[str]]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None, frozenset()
    vendor: str | None = None
    flags: frozenset[str] = frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id" and vendor is None:
            vendor = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = frozenset(value.split())
    return vendor, flags


def cpu_vendor() -> str | None:
    """This CPU's vendor id (GenuineIntel, AuthenticAMD, ...), None when it cannot be read."""
    return _cpuinfo()[0]


def cpu_has_native_bf16() -> bool:
    """True when this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX), where bf16 pays off."""
    flags = _cpuinfo()[1]
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_has_amx() -> bool:
    """True on CPUs with AMX bf16 tiles (Intel Xeon since Sapphire Rapids)."""
    return "amx_bf16" in _cpuinfo()[1]


def cpu_has_onednn_bf16() -> bool:
    """True when oneDNN's bf16 linears run here: its weight reorder refuses CPUs without AVX-NE-CONVERT
    or AVX512 BW+VL+DQ (an AVX2-only EPYC, say) with a RuntimeError at load time."""
    flags = _cpuinfo()[1]
    return "avx_ne_convert" in flags or {"avx512bw", "avx512vl", "avx512dq"} <= flags
