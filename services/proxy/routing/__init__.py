"""LiteLLM's side: the router's replicas kept in step with the registry, and the callbacks that
ask for token ids and logprobs, pin a trial to a replica and log each call."""
