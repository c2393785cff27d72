"""Distillation: backbone + head + LoRA, losses, collation, the accelerate loop, export."""

from .config import DataConfig, LoraSettings, LossConfig, ModelConfig, TrainJobConfig, TrainSettings
from .loop import evaluate, load_data, train

__all__ = ["DataConfig", "LoraSettings", "LossConfig", "ModelConfig", "TrainJobConfig", "TrainSettings", "evaluate", "load_data", "train"]
