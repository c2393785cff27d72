"""Distillation: backbone + head + LoRA, losses, collation, the accelerate loop (setup, resume,
steps, export), resumable state."""

from .config import DataConfig, LoraSettings, LossConfig, ModelConfig, TrainJobConfig, TrainSettings
from .data import load_data
from .export import evaluate
from .loop import train

__all__ = ["DataConfig", "LoraSettings", "LossConfig", "ModelConfig", "TrainJobConfig", "TrainSettings", "evaluate", "load_data", "train"]
