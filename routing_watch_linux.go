package main

import (
	"bytes"
	"fmt"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// inotifyMask is what the watch on the groups directory listens for: data
// written (the -wal of a commit, the database at a checkpoint) and files
// appearing, disappearing or being renamed into place (a group created or
// deleted).
const inotifyMask = syscall.IN_MODIFY | syscall.IN_CREATE | syscall.IN_DELETE |
	syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_DELETE_SELF

// probeWatch reports whether dir can be watched, by adding and dropping an
// inotify watch on it.
func probeWatch(dir string) error {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("inotify_init1: %w", err)
	}
	defer syscall.Close(fd)
	if _, err := syscall.InotifyAddWatch(fd, dir, inotifyMask); err != nil {
		return fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	return nil
}

// watchDirectory watches dir with inotify and calls emit with the name of
// each file that changed, or "" when the kernel dropped events. The watch
// only names paths, never opens the database files, so it cannot disturb
// SQLite's POSIX locks. stop removes the watch, which wakes the reading
// goroutine with IN_IGNORED, and waits for it to end.
func watchDirectory(dir string, emit func(name string)) (stop func(), err error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	wd, err := syscall.InotifyAddWatch(fd, dir, inotifyMask)
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer syscall.Close(fd)
		readInotify(fd, emit)
	}()
	return func() {
		syscall.InotifyRmWatch(fd, uint32(wd))
		<-done
	}, nil
}

// readInotify reads events until the watch is removed or reading fails,
// pausing after each read (watchPacer) so that the kernel merges the
// events that arrive meanwhile.
func readInotify(fd int, emit func(name string)) {
	buf := make([]byte, 64<<10)
	var pacer watchPacer
	for {
		start := time.Now()
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
			off += syscall.SizeofInotifyEvent + int(ev.Len)
			switch {
			case ev.Mask&syscall.IN_IGNORED != 0:
				return
			case ev.Mask&syscall.IN_Q_OVERFLOW != 0:
				emit("")
			case ev.Len > 0:
				name := string(bytes.TrimRight(nameBytes, "\x00"))
				// A -wal file appears when a connection opens the group
				// and goes away when the last one closes; only writes to
				// it are commits. Announcing the rest would let the
				// handle cache's opens and closes wake its own poller in
				// a loop.
				if strings.HasSuffix(name, "-wal") && ev.Mask&syscall.IN_MODIFY == 0 {
					continue
				}
				emit(name)
			}
		}
		pacer.sleep(time.Since(start))
	}
}
