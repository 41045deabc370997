// Package client stands for sigs.k8s.io/controller-runtime/pkg/client.
package client
