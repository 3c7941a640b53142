//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"syscall"
	"time"
)

// queueFD is an open side file of a group's write queue.
type queueFD int

// openQueueFile opens a write queue's side file, creating it when create is
// set. Each wait opens its own descriptor, because a flock belongs to the
// open file description and goes with its close. It is read-only: flock
// needs no write access, and closing it raises no IN_CLOSE_WRITE event for
// the change watcher. A FIFO or symlink at path must neither block the open
// nor lead out of the groups directory, hence O_NONBLOCK and O_NOFOLLOW.
func openQueueFile(path string, create bool) (queueFD, error) {
	flags := syscall.O_RDONLY | syscall.O_CLOEXEC | syscall.O_NONBLOCK | syscall.O_NOFOLLOW
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
// closes fd and returns a no-op. It polls with LOCK_NB because a blocking
// flock cannot time out: it would hold its thread and descriptor until the
// holder let go, which a holder stopped with Ctrl-Z does only on resuming.
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

// queuePoll is the pause between two tries for a write queue's lock, fixed
// where SQLite's busy handler sleeps up to 100 ms. It is 1 ms because Go's
// timers wake no sooner on Linux: 250 µs slept 1.1 ms, as 1 ms does, and a
// true 250 µs pause (nanosleep) was measured no better in a burst and slower
// in a closed loop, where the polling takes the CPU the lock holder needs.
const queuePoll = time.Millisecond
