import subprocess
import sys

import pytest
from pydantic import ValidationError

from rlstack.trainer.config import TrainerSettings


def test_sync_mode_must_match_what_is_trained():
    with pytest.raises(ValidationError, match="set lora.rank"):
        TrainerSettings(sync={"mode": "lora"})
    with pytest.raises(ValidationError, match="use sync.mode=lora"):
        TrainerSettings(sync={"mode": "filesystem"}, lora={"rank": 8})
    assert TrainerSettings(sync={"mode": "lora"}, lora={"rank": 8}).lora.rank == 8


def test_loss_settings_nest_from_flags_and_env(monkeypatch):
    monkeypatch.setenv("RLSTACK_TRAINER_LOSS__KL_COEF", "0.05")
    settings = TrainerSettings.from_cli(["--loss.clip-high", "0.3", "--sync.mode", "none"])
    assert settings.loss.clip_high == 0.3 and settings.loss.kl_coef == 0.05


def test_sync_mode_is_a_typed_union(tmp_path):
    from rlstack.trainer.config import BroadcastSync, FilesystemSync, LoraSync, NoSync

    assert TrainerSettings(run_dir=tmp_path).sync_spec == FilesystemSync(weights_dir=tmp_path / "weights")
    assert TrainerSettings(sync={"mode": "broadcast", "broadcast_host": "10.0.0.7"}).sync_spec == BroadcastSync(host="10.0.0.7")
    lora = TrainerSettings(sync={"mode": "lora", "weights_dir": tmp_path / "w"}, lora={"rank": 8}).sync_spec
    assert lora == LoraSync(weights_dir=tmp_path / "w", rank=8)
    assert TrainerSettings(sync={"mode": "none"}).sync_spec == NoSync()


def test_a_trainer_trains_the_queue_of_the_policy_whose_replicas_it_syncs():
    assert TrainerSettings().policy == "policy"  # one policy: the served name
    assert TrainerSettings(served_model_name="helper", batcher_policy="helper").policy == "helper"
    with pytest.raises(ValidationError, match="batcher_policy 'lead' is not served_model_name 'helper'"):
        TrainerSettings(served_model_name="helper", batcher_policy="lead")


def test_reading_the_settings_imports_no_http_client_nor_torch():
    """``--help``, ``--dry-run`` and the chart's tests read these settings: no httpx, registry client or torch."""
    code = ("import sys, rlstack.trainer.config as c; c.TrainerSettings(sync={'mode': 'none'}); "
            "print(sorted(m for m in ('httpx', 'torch', 'rlstack.common.registry_client', 'rlstack.trainer.sync') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_prefix_sharing_is_on_only_with_a_length_packing_and_varlen_attention():
    on = TrainerSettings(sync={"mode": "none"}, packing={"row_tokens": 4096, "share_prefix": 64}).packing
    assert on.prefix_trees == 64
    assert on.model_copy(update={"share_prefix": None}).prefix_trees is None
    assert on.model_copy(update={"row_tokens": None}).prefix_trees is None
    assert on.model_copy(update={"attention": "sdpa"}).prefix_trees is None


def test_off_is_null_as_a_flag_and_as_an_env_var_and_the_old_zero_still_turns_it_off(monkeypatch, caplog):
    assert TrainerSettings.from_cli(["--sync.mode", "none", "--packing.share-prefix", "null"]).packing.share_prefix is None
    monkeypatch.setenv("RLSTACK_TRAINER_PACKING__SHARE_PREFIX", "null")
    assert TrainerSettings.from_cli(["--sync.mode", "none"]).packing.share_prefix is None
    monkeypatch.setenv("RLSTACK_TRAINER_PACKING__SHARE_PREFIX", "0")
    with caplog.at_level("WARNING"):
        assert TrainerSettings.from_cli(["--sync.mode", "none"]).packing.share_prefix is None
    assert "off is spelled null" in caplog.text
    monkeypatch.setenv("RLSTACK_TRAINER_PACKING__SHARE_PREFIX", "32")
    assert TrainerSettings.from_cli(["--sync.mode", "none"]).packing.share_prefix == 32
