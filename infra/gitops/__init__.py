"""GitOps: a plan as a pull request on a GitOps repository (kustomize base/overlays, optional Argo CD or Flux
objects), with a body a reviewer can judge in a minute. Entry point: `infra.api.open_pr` (`infra pr`)."""
