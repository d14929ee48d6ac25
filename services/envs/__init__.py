"""Environment servers: produce rollouts through the proxy, score them, post groups to the batcher.

Single-turn tasks (``runner.py``, ``tasks.py``) and agent trials (``agent_trials.py``, running
``rlstack.episodes``) share registration, back-pressure and posting.
"""
