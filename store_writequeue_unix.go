//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"syscall"
	"time"
)

// queueFD is an open side file of a writeQueue.
type queueFD int

// openQueueFile opens a write queue's side file, creating it when create is
// set. A fresh descriptor per wait keeps a wait that timed out from sharing
// its lock with the next one: flock locks belong to the open file
// description, and closing the descriptor releases them. Read-only, because
// flock needs no write access and closing a read-only descriptor raises no
// IN_CLOSE_WRITE event for the change watcher.
func openQueueFile(path string, create bool) (queueFD, error) {
	flags := syscall.O_RDONLY | syscall.O_CLOEXEC
	if create {
		flags |= syscall.O_CREAT
	}
	for {
		fd, err := syscall.Open(path, flags, 0o644)
		if err != syscall.EINTR {
			return queueFD(fd), err
		}
	}
}

func closeQueueFile(fd queueFD) { syscall.Close(int(fd)) }

// lockQueueFile takes an exclusive flock on fd, waiting at most wait, and
// returns the function that releases it and closes fd; past the wait it
// closes fd and returns a no-op. It polls with LOCK_NB rather than block
// in flock, which no timer can interrupt: a blocked wait that timed out
// would leave its thread and descriptor behind until the holder let go,
// and a holder stopped with Ctrl-Z lets go only when it resumes. The polls
// are queuePoll apart, far shorter than a transaction, so the lock still
// passes to a waiter about as soon as it is free, unlike SQLite's busy
// handler, whose sleeps grow to 100 ms.
func lockQueueFile(fd queueFD, wait time.Duration) func() {
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return func() {
				syscall.Flock(int(fd), syscall.LOCK_UN)
				closeQueueFile(fd)
			}
		case err != syscall.EWOULDBLOCK && err != syscall.EINTR, time.Now().After(deadline):
			closeQueueFile(fd)
			return func() {}
		}
		time.Sleep(queuePoll)
	}
}

// queuePoll is the pause between two tries for a write queue's lock.
const queuePoll = 250 * time.Microsecond
