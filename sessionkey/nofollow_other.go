//go:build !linux

package sessionkey

// noFollow: the pool is used by serve, on Linux only; elsewhere the
// package provisions keys and nothing opens a pool.
const noFollow = 0
