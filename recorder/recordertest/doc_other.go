//go:build !linux

// Package recordertest is Linux-only, as the recorder is
// (record_linux.go); the tests that use it are too.
package recordertest
