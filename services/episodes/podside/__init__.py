"""The half of a Kubernetes trial that runs inside its pod, on the agent bundle's own CPython.

A trial pod runs the task's image, which may have no Python at all: these modules come with the
agent bundle (``rlstack.episodes.bundle``) and use the standard library and ``rlstack.common``
only, so they run in any image the bundle runs in.

- ``copy_bundle``: the init container that copies the bundle (its core and the trial's agent)
  from the bundle image into the pod's ``emptyDir`` at ``/opt/rlstack``;
- ``trial``: the main container's first process (PID 1): the agent's phase, every process it
  left killed, then the tests put in place and the verifier's phase, in one container filesystem.
"""
