"""The one config loader: renamed keys keep working under their old names, and the shortcut flags of
the YAML commands are their config keys (type, choices, help and precedence)."""

import argparse
import warnings

import pytest

from prm_distill.cli import RECALIBRATE_FLAGS, ROLLOUT_FLAGS, build_parser
from prm_distill.config import ConfigError, add_flags, flag_values, load_config
from prm_distill.labeling import LabelJobConfig
from prm_distill.pipeline.config import load_pipeline_config
from prm_distill.recalibrate import RecalibrateConfig
from prm_distill.rollout import RolloutConfig
from prm_distill.steps import SplitConfig, splitter_config


def test_the_step_splitter_and_the_dataset_split_have_distinct_names():
    """`split` meant the step splitter in the label config and a dataset split in the rollout config;
    now the splitter is `splitter` in both (and in the RL scorer's args), the data split `dataset_split`."""
    label = load_config(LabelJobConfig, None, ["splitter.min_chars=5"])
    rollout = load_config(RolloutConfig, None, ["splitter.sentences_per_step=1", "dataset_split=train"])
    assert label.splitter.min_chars == 5 and rollout.splitter.sentences_per_step == 1 and rollout.dataset_split == "train"
    with pytest.warns(FutureWarning, match=r"config key split is now splitter"):
        assert load_config(LabelJobConfig, None, ["split.min_chars=7"]).splitter.min_chars == 7
    with pytest.warns(FutureWarning, match=r"config key split is now dataset_split"):
        assert load_config(RolloutConfig, None, ["split=validation"]).dataset_split == "validation"
    with pytest.warns(FutureWarning, match=r"config key steps is now splitter"):
        assert load_config(RolloutConfig, None, ["steps.max_chars=99"]).splitter.max_chars == 99


def test_old_nested_names_work_inside_the_pipeline_config_and_new_ones_warn_nothing(tmp_path):
    (tmp_path / "p.yaml").write_text("train:\n  train:\n    max_steps: 3\nlabel:\n  split:\n    min_chars: 4\n")
    with pytest.warns(FutureWarning) as seen:
        cfg = load_pipeline_config(tmp_path / "p.yaml", ["train.train.batch_size=2"])
    assert {str(w.message).split(" is now")[0] for w in seen} == {"config key train.train", "config key label.split"}
    assert (cfg.train.optim.max_steps, cfg.train.optim.batch_size, cfg.label.splitter.min_chars) == (3, 2, 4)
    assert cfg.train.optim.max_minutes == 6  # the main job's other optim values are kept (merged key by key)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_pipeline_config(None, ["train.optim.max_steps=4"]).train.optim.max_steps == 4


def test_old_and_new_name_together_is_an_error_naming_both():
    with pytest.raises(ConfigError, match=r"label\.split and label\.splitter are the same setting"):
        load_pipeline_config(None, ["label.split.min_chars=3", "label.splitter.min_chars=4"])


def test_splitter_argument_of_the_python_api_keeps_the_old_keyword():
    assert splitter_config({"min_chars": 3}) == SplitConfig(min_chars=3)
    assert splitter_config(None) == SplitConfig()
    with pytest.warns(FutureWarning, match="split= is now splitter="):
        assert splitter_config(split={"min_chars": 3}) == SplitConfig(min_chars=3)
    with pytest.raises(ValueError, match="give splitter only"):
        splitter_config({"min_chars": 3}, {"min_chars": 4})


def _rollout(argv: list[str], tmp_path=None) -> RolloutConfig:
    args = build_parser().parse_args(["rollout", *argv])
    return load_config(RolloutConfig, args.config, args.overrides, values=flag_values(args, ROLLOUT_FLAGS))


def test_rollout_flags_are_config_keys_and_win_over_file_and_overrides(tmp_path):
    (tmp_path / "r.yaml").write_text("k: 2\ntemperature: 0.5\npolicy:\n  base_url: http://a:1/v1\n  batch_size: 3\n")
    cfg = _rollout(["--config", str(tmp_path / "r.yaml"), "--k", "4", "--base-url", "http://b:2/v1", "--dataset-split", "train",
                    "temperature=0.9", "policy.batch_size=5"])
    assert (cfg.k, cfg.temperature, cfg.policy.base_url, cfg.policy.batch_size, cfg.dataset_split) == (4, 0.9, "http://b:2/v1", 5, "train")
    assert cfg.limit is None and cfg.policy.concurrency == 8  # unset flags leave the defaults alone
    assert _rollout(["--config", str(tmp_path / "r.yaml"), "--split", "test"]).dataset_split == "test"  # the old flag


def test_flag_types_and_choices_come_from_the_field(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["rollout", "--k", "two"])
    assert "invalid int value: 'two'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["rollout", "--backend", "tgi"])
    assert "invalid choice: 'tgi'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["recalibrate", "--method", "beta"])
    assert "invalid choice: 'beta'" in capsys.readouterr().err
    args = build_parser().parse_args(["recalibrate", "--method", "isotonic"])
    assert flag_values(args, RECALIBRATE_FLAGS) == {"calibration.method": "isotonic"}
    assert load_config(RecalibrateConfig, None, [], values=flag_values(args, RECALIBRATE_FLAGS)).calibration.method == "isotonic"


def test_add_flags_refuses_a_key_that_is_not_in_the_config():
    with pytest.raises(KeyError, match="policy.nope: no such key"):
        add_flags(argparse.ArgumentParser(), RolloutConfig, {"--nope": "policy.nope"})
    with pytest.raises(KeyError, match="k.x: k is not a section"):
        add_flags(argparse.ArgumentParser(), RolloutConfig, {"--x": "k.x"})


def test_accelerates_no_stays_a_string_and_only_true_false_are_booleans(tmp_path):
    from prm_distill.train import TrainJobConfig

    cfg = load_config(TrainJobConfig, None, ["optim.mixed_precision=no", "lora.enabled=false"])
    assert cfg.optim.mixed_precision == "no" and cfg.lora.enabled is False
    f = tmp_path / "c.yaml"
    f.write_text("optim:\n  mixed_precision: no\nlora:\n  enabled: True\n")
    cfg = load_config(TrainJobConfig, f, [])
    assert cfg.optim.mixed_precision == "no" and cfg.lora.enabled is True
    with pytest.raises(ConfigError, match="lora.enabled: expected true or false, got 'yes'"):
        load_config(TrainJobConfig, None, ["lora.enabled=yes"])
