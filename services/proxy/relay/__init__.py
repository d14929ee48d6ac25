"""Token-in: LiteLLM's upstream on loopback, sending a trial's calls to vLLM on its threads' exact ids."""
