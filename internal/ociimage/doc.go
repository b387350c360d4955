// Package ociimage builds the project's container image without a Docker
// engine or a base image: the static coordinator binary on an empty root
// file system, run as a non-root user. The image is written as a tarball
// that `docker load`, `ctr images import` and `kind load image-archive`
// accept, or pushed to a registry.
package ociimage
