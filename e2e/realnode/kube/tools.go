//go:build tools

// Package tools pins the node components built from k8s.io/kubernetes for `e2e/cluster up --real-node`.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
