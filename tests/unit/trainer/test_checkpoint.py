import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlstack.trainer import checkpoint


def small_model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1))


def test_save_keeps_the_newest_and_restores_step_weights_and_optimizer(tmp_path):
    model = small_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in (1, 2, 3):
        model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
        optimizer.step()
        checkpoint.save(tmp_path, model, optimizer, checkpoint.CheckpointState(step=step, weight_version=step), keep=2)
    assert [p.name for p in checkpoint.complete(tmp_path)] == ["step-000002", "step-000003"]

    latest = checkpoint.latest(tmp_path)
    assert checkpoint.load_state(latest).step == 3
    restored = Qwen2ForCausalLM.from_pretrained(latest)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), restored.state_dict().values()))
    fresh = torch.optim.AdamW(restored.parameters(), lr=1e-2)
    checkpoint.load_optimizer(latest, fresh)
    assert fresh.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]


def test_an_unfinished_checkpoint_is_never_the_latest(tmp_path):
    model = small_model()
    optimizer = torch.optim.AdamW(model.parameters())
    checkpoint.save(tmp_path, model, optimizer, checkpoint.CheckpointState(step=1, weight_version=1))
    (tmp_path / ".tmp-step-000002").mkdir()  # a kill mid-write
    (tmp_path / "step-000003").mkdir()  # no state file: incomplete
    assert checkpoint.latest(tmp_path).name == "step-000001"
    assert checkpoint.latest(tmp_path / "missing") is None
