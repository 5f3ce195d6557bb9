//go:build tools

// Package crdgen pins controller-gen for `make crds`.
package crdgen

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
