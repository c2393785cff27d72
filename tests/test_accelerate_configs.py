"""The shipped `accelerate launch` configs are read by accelerate as the README says (DDP, FSDP,
DeepSpeed ZeRO-2/3). They are run for real on two CPU processes: ddp-cpu.yaml in tests/test_train.py,
fsdp.yaml and deepspeed-zero{2,3}.yaml (with --num_processes 2) in tests/test_sharded.py."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "accelerate"


def _validated(name: str):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    args = launch_command_parser().parse_args(["--config_file", str(CONFIGS / name), "-m", "prm_distill.cli", "train"])
    return _validate_launch_command(args)[0]


@pytest.mark.parametrize("name, flag, processes", [("ddp.yaml", "multi_gpu", 2), ("ddp-cpu.yaml", "multi_gpu", 2), ("fsdp.yaml", "use_fsdp", 8),
                                                  ("deepspeed-zero2.yaml", "use_deepspeed", 8), ("deepspeed-zero3.yaml", "use_deepspeed", 8)])
def test_each_config_selects_its_launcher(name, flag, processes):
    args = _validated(name)
    assert getattr(args, flag) is True and args.num_processes == processes
    if flag == "use_deepspeed":
        assert args.zero_stage == int(name[-6]) and args.gradient_accumulation_steps is None  # left to the train config


def test_fsdp_config_becomes_the_plugin_it_describes(monkeypatch):
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_multi_gpu_env

    for key, value in prepare_multi_gpu_env(_validated("fsdp.yaml")).items():
        monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2 and plugin.transformer_cls_names_to_wrap == ["LlamaDecoderLayer"]
    assert plugin.state_dict_type.name == "FULL_STATE_DICT" and plugin.reshard_after_forward is True
