// Package compose tests the reference deployment in compose/: static checks
// that parse docker-compose.yml and the Kubernetes manifests and fail on any
// weakening of the workload/sidecar boundary, and (with
// APTL_CAPTURE_DOCKER_TESTS=1 and a Docker engine) a live suite that builds
// the images from local material and attacks the boundary from a root shell
// in the real workload container.
package compose
