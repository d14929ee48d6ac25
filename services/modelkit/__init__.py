"""Model tooling: the tiny demo model and its tokenizer, built on the spot (nothing downloaded)."""
