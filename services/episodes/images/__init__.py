"""Task images: a Harbor task's ``environment/`` built into a container image, once per content.

    digest      the environment's content hash, and the image ref named after it
    config      ImageSettings (``RLSTACK_TASKS_*``): builder, base map, jobs, cache directory
    dockerfile  FROM lines rewritten through the base map
    engine      podman / buildah command lines, the only module that runs them
    builder     one task's image: built, or found already built (docker_image: found or pulled)
    rootfs      an image's filesystem unpacked once per image id, where the store's layers cannot serve
    lock        images.lock.json: each task's image, checked against the task when resolved
    push        an image pushed to a registry and named by its digest
    dataset     every task of a dataset, in parallel, with progress; --push to a registry
    resolve     the image (layers or unpacked tree) a sandbox runs a task's trial in
    base        a Debian bookworm base image from Debian's packages (debootstrap), no registry needed

``rlstack tasks build`` and ``rlstack tasks base`` (``rlstack.cli.tasks``) drive them.
"""
