"""The scripted teacher: an upstream that answers generated tasks with their reference tool calls
(``scripted``), and the same turns forced token by token through vLLM's sampler (``forcing``) in
the tokens each model family writes (``formats``)."""
