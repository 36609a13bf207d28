"""The Ray Serve service: HTTP ingress, query encoder, partition deployments, fan-out, deploy and switch-over, and the HTTP client."""
