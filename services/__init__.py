"""rlstack: an RL post-training stack in which the policy serves itself.

One sub-package per service (``python -m rlstack.<service>``); ``common`` holds what they share.
"""

__version__ = "0.1.0"
