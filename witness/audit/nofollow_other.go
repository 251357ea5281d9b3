//go:build !linux

package audit

const noFollow = 0
