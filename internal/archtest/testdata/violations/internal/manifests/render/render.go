// Package render stands in for the manifest renderer.
package render
