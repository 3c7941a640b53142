package main

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// inotifyWatch follows the groups directory with inotify. The directory's
// own watch reports names appearing, going away or renamed into place.
// Following named groups, each group's database and -wal file has a watch
// of its own, armed for one event (IN_ONESHOT) and re-armed after the
// reader's pause, when its file is reported again to cover the writes
// meanwhile; following every group, or when a file watch cannot be added,
// the directory watch takes IN_MODIFY too.
//
// One-shot watches, because the kernel queues an event for every watcher
// at every write(2): with eight members watching one busy group that cost
// each commit about 0.4 ms under the group's write lock, 15% of the sends.
// The watch never opens the database files, so it cannot disturb SQLite's
// POSIX locks.
type inotifyWatch struct {
	fd    int
	dirWd int
	dir   string
	emit  func(name string)
	read  sync.WaitGroup // the reader, joined by stop

	// mu guards the fields below, which followGroups and the reader share. The
	// reader never holds it while calling emit, so no lock of the change
	// watcher is ever taken under it.
	mu sync.Mutex
	// groups is the followed groups by database file name; nil while
	// following every group, when the directory watch takes IN_MODIFY.
	groups   map[string]bool
	files    map[int32]string // armed one-shot watch → file name
	disarmed map[string]bool  // files whose watch fired, to re-arm after the pause
}

// inotifyDirMask is what the directory watch always listens for: names
// appearing, disappearing or renamed, and the directory itself going away.
const inotifyDirMask = syscall.IN_CREATE | syscall.IN_DELETE | syscall.IN_MOVED_FROM |
	syscall.IN_MOVED_TO | syscall.IN_DELETE_SELF

// inotifyFileMask is the mask of a followed group's file watch: the next
// write, once.
const inotifyFileMask = syscall.IN_MODIFY | syscall.IN_ONESHOT

// inotifyMaxFollowed is the most groups a watch follows file by file (two
// watches each); past it the directory watch takes every write instead,
// since watches come out of a per-user kernel budget (8,192 on older
// kernels) shared with the user's editors and build tools.
const inotifyMaxFollowed = 256

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

// watchDirectory watches dir with inotify, following every group until
// told otherwise, and calls emit with the name of each file that changed,
// or "" when the kernel dropped events.
func watchDirectory(dir string, emit func(name string)) (fileWatch, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	wd, err := syscall.InotifyAddWatch(fd, dir, inotifyDirMask|syscall.IN_MODIFY)
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	iw := &inotifyWatch{fd: fd, dirWd: wd, dir: dir, emit: emit, files: map[int32]string{}, disarmed: map[string]bool{}}
	iw.read.Go(func() {
		defer syscall.Close(fd)
		iw.readEvents()
	})
	return iw, nil
}

// stop removes the directory watch, which wakes the reader with IN_IGNORED,
// and waits for it to end; closing the descriptor drops the file watches.
func (iw *inotifyWatch) stop() {
	syscall.InotifyRmWatch(iw.fd, uint32(iw.dirWd))
	iw.read.Wait()
}

// followGroups reports writes of the groups named from now on, or of every
// group when groups is nil or longer than inotifyMaxFollowed. File watches
// are armed before the directory watch stops taking IN_MODIFY, so no write
// falls between the two.
func (iw *inotifyWatch) followGroups(groups []string) {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	if groups == nil || len(groups) > inotifyMaxFollowed {
		iw.followAll()
		return
	}
	want := make(map[string]bool, len(groups))
	for _, g := range groups {
		want[filepath.Base(groupFile(iw.dir, g))] = true
	}
	for wd, name := range iw.files {
		if !want[groupDB(name)] {
			syscall.InotifyRmWatch(iw.fd, uint32(wd))
			delete(iw.files, wd)
		}
	}
	for name := range iw.disarmed {
		if !want[groupDB(name)] {
			delete(iw.disarmed, name)
		}
	}
	armed := map[string]bool{}
	for _, name := range iw.files {
		armed[name] = true
	}
	for db := range want {
		for _, name := range []string{db, db + "-wal"} {
			if armed[name] || iw.disarmed[name] {
				continue
			}
			if _, ok := iw.arm(name); !ok {
				return // following every group now
			}
		}
	}
	wasAll := iw.groups == nil
	iw.groups = want
	if wasAll {
		iw.setDirMask(inotifyDirMask)
	}
}

// followAll makes the directory watch take every write again and drops
// the file watches; iw.mu is held. It is also the way back when a file
// watch cannot be added (the inotify watch limit reached).
func (iw *inotifyWatch) followAll() {
	if iw.groups != nil {
		iw.setDirMask(inotifyDirMask | syscall.IN_MODIFY)
	}
	for wd := range iw.files {
		syscall.InotifyRmWatch(iw.fd, uint32(wd))
	}
	iw.groups, iw.files, iw.disarmed = nil, map[int32]string{}, map[string]bool{}
}

// setDirMask replaces the directory watch's mask; iw.mu is held. Adding a
// watch on a path already watched keeps its descriptor.
func (iw *inotifyWatch) setDirMask(mask uint32) {
	if _, err := syscall.InotifyAddWatch(iw.fd, iw.dir, mask); err != nil {
		logf("watch %s: %v", iw.dir, err)
	}
}

// arm watches file name for its next write and reports whether it is now
// watched; iw.mu is held. A file that does not exist yet is armed when it
// appears. ok is false when arm fell back to followAll.
func (iw *inotifyWatch) arm(name string) (watched, ok bool) {
	wd, err := syscall.InotifyAddWatch(iw.fd, filepath.Join(iw.dir, name), inotifyFileMask)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return false, true
	case err != nil:
		logf("watch %s: %v; watching every write to the directory instead", name, err)
		iw.followAll()
		return false, false
	}
	iw.files[int32(wd)] = name
	return true, true
}

// readEvents handles events until the directory watch is removed or
// reading fails, pausing after each read (watchPacer).
func (iw *inotifyWatch) readEvents() {
	buf := make([]byte, 64<<10)
	var pacer watchPacer
	for {
		start := time.Now()
		n, err := syscall.Read(iw.fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		names, ended := iw.events(buf[:n])
		for _, name := range names {
			iw.emit(name)
		}
		if ended {
			return
		}
		pacer.sleep(time.Since(start))
		for _, name := range iw.rearm() {
			iw.emit(name)
		}
	}
}

// events decodes one read's events and returns the names to report, in
// order ("" for lost events), and whether the directory watch ended.
func (iw *inotifyWatch) events(buf []byte) (names []string, ended bool) {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	for off := 0; off+syscall.SizeofInotifyEvent <= len(buf); {
		ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
		nameBytes := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
		off += syscall.SizeofInotifyEvent + int(ev.Len)
		name := string(bytes.TrimRight(nameBytes, "\x00"))
		switch {
		case ev.Mask&syscall.IN_Q_OVERFLOW != 0:
			names = append(names, "")
		case ev.Wd == int32(iw.dirWd):
			if ev.Mask&syscall.IN_IGNORED != 0 {
				return names, true
			}
			if report := iw.dirEvent(name, ev.Mask); report {
				names = append(names, name)
			}
		default:
			// A followed file: its one-shot watch fired, or it was
			// removed (IN_IGNORED) and is armed again if it reappears.
			fired, ok := iw.files[ev.Wd]
			if !ok {
				continue
			}
			delete(iw.files, ev.Wd)
			if ev.Mask&syscall.IN_MODIFY != 0 {
				iw.disarmed[fired] = true
				names = append(names, fired)
			}
		}
	}
	return names, false
}

// dirEvent handles an event of the directory watch on file name and
// reports whether to announce it; iw.mu is held. A -wal file appears and
// goes away with connections, so only writes to it are announced, lest the
// handle cache's opens wake its own poller in a loop. A followed group's
// file that appears is armed, and a -wal file already holding frames then
// was written before its watch, so it is announced.
func (iw *inotifyWatch) dirEvent(name string, mask uint32) bool {
	wal := strings.HasSuffix(name, "-wal")
	if iw.groups == nil {
		return !wal || mask&syscall.IN_MODIFY != 0
	}
	if mask&(syscall.IN_CREATE|syscall.IN_MOVED_TO) != 0 && iw.groups[groupDB(name)] && !strings.HasSuffix(name, "-journal") {
		if watched, _ := iw.arm(name); watched && wal {
			info, err := os.Stat(filepath.Join(iw.dir, name))
			return err == nil && info.Size() > 0
		}
	}
	return !wal
}

// rearm arms again the watches that fired before the pause and returns
// their files, which may have been written while disarmed.
func (iw *inotifyWatch) rearm() []string {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	names := slices.Collect(maps.Keys(iw.disarmed))
	clear(iw.disarmed)
	for _, name := range names {
		if _, ok := iw.arm(name); !ok {
			break // following every group now
		}
	}
	return names
}
