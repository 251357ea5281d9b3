//go:build !linux

// Package launchtest is Linux-only (session_linux.go).
package launchtest
