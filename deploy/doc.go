// Package deploy holds Sluice's deployment files, not Go code: the
// Kubernetes manifests in deploy/kubernetes/ (a kustomization, and a
// kustomize component adding Redis in deploy/kubernetes/redis/). Its tests
// check those manifests and the repository's Dockerfile against what the
// sluice binary reads. docs/deploy.md explains them.
package deploy
