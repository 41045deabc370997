// Package route is data plane and clean.
package route
