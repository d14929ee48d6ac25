"""Model tooling: the demo policies (tokenizer and tiny model built on the spot), tiny policies of
real model families and SmolLM2's real weights (from what ``make setup-families`` installed), the
scripted teacher and its warm starts. Nothing is downloaded at run time."""
