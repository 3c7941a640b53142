package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// inotifyWatch follows the groups directory with one inotify watch, which
// reports names appearing, going away or renamed into place and every
// write to a file in it; changeWatcher.changed drops the groups no
// subscription wants. The kernel queues an event for every watcher at
// every write(2), but measured interleaved against per-group one-shot
// watches (paced and burst sends, eight members watching one busy group,
// wakeup latency, idle CPU) that cost no figure an agent would notice.
// The watch never opens the database files, so it cannot disturb SQLite's
// POSIX locks.
type inotifyWatch struct {
	f     *os.File // the non-blocking instance, read through Go's poller
	fd    int      // its number, for inotify_rm_watch (f.Fd would make it blocking)
	dirWd int
	emit  func(name string)
	read  sync.WaitGroup // the reader, joined by stop
}

// inotifyDirMask is what the directory watch and the probe's listen for.
const inotifyDirMask = syscall.IN_MODIFY | syscall.IN_CREATE | syscall.IN_DELETE |
	syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_DELETE_SELF

// probeWatch reports whether dir can be watched, by adding an inotify
// watch on it, and returns the release of that instance, which the caller
// runs aside: closing it waits an RCU grace period of 5 to 25 ms.
func probeWatch(dir string) (release func(), err error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, inotifyDirMask); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	return func() { syscall.Close(fd) }, nil
}

// watchDirectory watches dir with inotify and calls emit with the name of
// each file that changed, or "" when the kernel dropped events.
func watchDirectory(dir string, emit func(name string)) (fileWatch, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	wd, err := syscall.InotifyAddWatch(fd, dir, inotifyDirMask)
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	iw := &inotifyWatch{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, dirWd: wd, emit: emit}
	iw.read.Go(iw.readEvents)
	return iw, nil
}

// stop removes the directory watch and closes the instance, which ends a
// pending read even when a full queue dropped the IN_IGNORED that removing
// the watch raises, and waits for the reader. The poller closes the number
// only once the read has returned, so no other instance can reuse it
// under the reader.
func (iw *inotifyWatch) stop() {
	syscall.InotifyRmWatch(iw.fd, uint32(iw.dirWd))
	iw.f.Close()
	iw.read.Wait()
}

// readEvents handles events until the directory watch is removed or
// reading fails, pausing after each read (watchPacer).
func (iw *inotifyWatch) readEvents() {
	buf := make([]byte, 64<<10)
	var pacer watchPacer
	for {
		start := time.Now()
		n, err := iw.f.Read(buf)
		if err != nil || n <= 0 {
			return
		}
		if ended := iw.events(buf[:n]); ended {
			return
		}
		pacer.sleep(time.Since(start))
	}
}

// events reports one read's events, in order ("" for lost events), and
// returns whether the directory watch ended. A -wal file appears and goes
// away with connections, so only writes to it are reported, lest the
// handle cache's opens wake its own poller in a loop.
func (iw *inotifyWatch) events(buf []byte) (ended bool) {
	for off := 0; off+syscall.SizeofInotifyEvent <= len(buf); {
		ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := string(bytes.TrimRight(buf[off+syscall.SizeofInotifyEvent:][:ev.Len], "\x00"))
		off += syscall.SizeofInotifyEvent + int(ev.Len)
		switch {
		case ev.Mask&syscall.IN_Q_OVERFLOW != 0:
			iw.emit("")
		case ev.Mask&syscall.IN_IGNORED != 0:
			return true
		case !strings.HasSuffix(name, "-wal") || ev.Mask&syscall.IN_MODIFY != 0:
			iw.emit(name)
		}
	}
	return false
}
