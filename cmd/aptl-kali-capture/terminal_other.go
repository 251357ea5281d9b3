//go:build !linux

package main

import (
	"errors"
	"os"
)

// isTerminal: off Linux, verify draws no progress line and play reads no
// keys.
func isTerminal(*os.File) bool { return false }

// keyMode: off Linux, play reads no keys (isTerminal is false there).
func keyMode(*os.File) (func() error, error) {
	return nil, errors.New("keys are read on Linux only")
}
