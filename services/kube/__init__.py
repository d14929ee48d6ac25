"""Kubernetes client code: sandbox pods for agent trials, and the registry's replica-pod watch.

Built on lightkube (typed resources, async, in-cluster and kubeconfig auth, watch with
resourceVersion bookkeeping) rather than hand-written HTTP.
"""
