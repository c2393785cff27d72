"""Builders of step-labelled training data from public sets (GSM8K first-error variants, PRMBench)."""

from .build import BuildConfig, build_from_gsm8k, build_from_steps
from .perturb import KINDS

__all__ = ["KINDS", "BuildConfig", "build_from_gsm8k", "build_from_steps"]
