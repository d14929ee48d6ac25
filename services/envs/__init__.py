"""Environment servers: produce rollouts through the proxy, score them, post groups to the batcher.

Single-turn tasks (``runner.py``, ``tasks/``) and agent trials of Harbor tasks (``harbor_runner.py``, running
``rlstack.episodes``; its task stream, outcomes and group rows beside it) share registration,
back-pressure and posting.
"""
