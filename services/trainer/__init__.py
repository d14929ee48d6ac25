"""The GRPO trainer: pulls batches from the batcher, steps the policy, pushes weights to replicas."""
