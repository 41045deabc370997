// Package lab stands for the lab.
package lab
