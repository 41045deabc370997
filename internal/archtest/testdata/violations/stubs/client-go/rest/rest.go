// Package rest stands for k8s.io/client-go/rest.
package rest
