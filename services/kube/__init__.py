"""Kubernetes client code: the connection, the auth secret and the registry's replica-pod watch
(the sandbox pods of agent trials are ``rlstack.episodes.sandboxes.pods``).

Built on lightkube (typed resources, async, in-cluster and kubeconfig auth, watch with
resourceVersion bookkeeping) rather than hand-written HTTP.
"""
