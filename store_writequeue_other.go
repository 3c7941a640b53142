//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

import (
	"errors"
	"time"
)

// queueFD stands for a side file on platforms without flock, where the
// write queue is off and writers rely on SQLite's lock alone.
type queueFD int

// openQueueFile never opens anything here, so no side file is created.
func openQueueFile(string, bool) (queueFD, error) { return 0, errors.ErrUnsupported }

func closeQueueFile(queueFD) {}

func lockQueueFile(queueFD, time.Duration) func() { return func() {} }
