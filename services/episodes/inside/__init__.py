"""What runs inside a trial's container, on the agent bundle's own CPython.

A trial runs in the task's image, which may have no Python at all: these modules come with the
agent bundle (``rlstack.episodes.bundle``) and use only the standard library, ``rlstack.common``
and the bundle's pydantic, so they run in any image the bundle runs in.

- ``copy_bundle``: the init container that copies the bundle (its core and the trial's agent)
  from the bundle image into the pod's ``emptyDir`` at ``/opt/rlstack``;
- ``trial``: the main container's first process (PID 1): the agent's phase, every process it
  left killed, then the tests put in place and the verifier's phase, in one container filesystem;
- ``become``: in the local image sandbox, a phase's switch to the image's ``USER``.
"""
