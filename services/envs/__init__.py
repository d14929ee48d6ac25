"""Environment servers: produce rollouts through the proxy, score them, post groups to the batcher.

Single-turn tasks (``runner.py``, ``tasks/``) and agent trials (``agent_trials.py``, running
``rlstack.episodes``; its task stream, outcomes and group rows beside it) share registration,
back-pressure and posting.
"""
