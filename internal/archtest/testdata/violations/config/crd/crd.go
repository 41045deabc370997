// Package crd stands for the embedded CRDs.
package crd
