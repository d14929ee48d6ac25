"""Model tooling: the demo policy (tokenizer and tiny model built on the spot, ``tiny``, and its
arithmetic warm start), tiny policies of real model families (``family_model``) and SmolLM2's real
weights (``smollm2``), from what ``make setup-families`` installed; the scripted teacher
(``teacher/``) and the agents' demo policies warm-started on what it taught (``agent_demo/``).
Nothing is downloaded at run time."""
