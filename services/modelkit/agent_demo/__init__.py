"""The agent demos' policies: the built-in agent's, warm-started on tool-call transcripts
(``builtin``), and each CLI agent's (``cli``), warm-started on what the real CLI sent (``capture``)
while the scripted teacher solved generated tasks, made into training rows (``corpus``)."""
