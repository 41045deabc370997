// Package cluster stands for join and leave.
package cluster
