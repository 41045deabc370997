// Package v1 stands for k8s.io/api/core/v1.
package v1
