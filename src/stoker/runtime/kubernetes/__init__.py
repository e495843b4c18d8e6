"""stoker on Kubernetes: the runtime (Pods through the Kubernetes API), the pods it builds,
the core's nodes from the cluster's, and the deployment's manifests.

Needs the ``kubernetes`` extra (``pip install 'stoker[kubernetes]'``): lightkube.
"""
