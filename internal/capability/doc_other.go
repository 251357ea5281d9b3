//go:build !linux

// Package capability is Linux-only (capability_linux.go); elsewhere nothing
// imports it.
package capability
