"""Episodes: what one agent episode is and where it runs, apart from any server.

- ``harbor/``: Harbor tasks (a directory: instruction, environment, verifier) and datasets of them;
- ``sandboxes/``: where a trial runs: a local bubblewrap sandbox or a Kubernetes pod (``pods.py``
  manages the pods), behind one interface;
- ``trials/``: one trial's run (agent, then verifier), its records, reward and ATIF trajectory;
- ``agents.py``: the agents a trial can run (the built-in agent, claude-code, any command);
- ``assemble.py``: a trial's logged model calls assembled into training sequences.

The env server (``rlstack.envs``) runs episodes and posts their groups; ``rlstack trial``
(``rlstack.ops.trial``) runs one by hand. This package imports only ``rlstack.common``; the
cluster connection the pod sandboxes use is made by its caller (``rlstack.envs.cluster``).
"""
