//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"syscall"
	"time"
)

// writeQueueAvailable reports whether this platform has the write queue.
const writeQueueAvailable = true

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
// returns the function that releases it and closes fd. Past the wait it
// returns a no-op and leaves the descriptor to a goroutine that closes it
// once its flock returns, which releases the lock if it was granted late.
func lockQueueFile(fd queueFD, wait time.Duration) func() {
	release := func() {
		syscall.Flock(int(fd), syscall.LOCK_UN)
		closeQueueFile(fd)
	}
	// An uncontended queue costs one system call and no goroutine.
	if err := syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		return release
	} else if err != syscall.EWOULDBLOCK && err != syscall.EINTR {
		closeQueueFile(fd)
		return func() {}
	}
	granted := make(chan error, 1)
	go func() {
		var err error
		for {
			if err = syscall.Flock(int(fd), syscall.LOCK_EX); err != syscall.EINTR {
				break
			}
		}
		granted <- err
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case err := <-granted:
		if err != nil {
			closeQueueFile(fd)
			return func() {}
		}
		return release
	case <-timer.C:
		go func() {
			<-granted
			closeQueueFile(fd)
		}()
		return func() {}
	}
}
