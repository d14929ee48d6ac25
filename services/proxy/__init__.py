"""The proxy: the real LiteLLM proxy with rlstack's layers, laid out by a call's path
(``edge/``, LiteLLM's ``routing/``, token-in's ``relay/``, ``records/``); ``app.py`` says the steps in order."""
