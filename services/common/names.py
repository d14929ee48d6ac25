"""The one shape of the ids that become file names, URL path segments and log fields: runs,
trials, replicas, trajectory writers. Kubernetes label values are stricter (see ``kube``)."""

ID_BODY = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
ID_PATTERN = rf"^{ID_BODY}$"
