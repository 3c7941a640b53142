//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// kqueueWatch follows the groups directory with kqueue, which reports
// writes per open file: besides the directory it keeps one descriptor on
// each group's -wal file, where every commit is written, re-watched when
// SQLite recreates it. It never opens a database or -shm file, since
// closing any descriptor of those would drop this process's SQLite locks.
type kqueueWatch struct {
	kq    int
	dirfd int
	wake  [2]int // a pipe: writing to wake[1] ends the loop
	dir   string
	emit  func(name string)
	files map[int]string  // watched -wal descriptor → file name
	wals  map[string]int  // file name → descriptor
	dbs   map[string]bool // group database names last seen in dir
	loops sync.WaitGroup  // the loop, joined by stop
}

const kqueueVnodeFlags = syscall.NOTE_WRITE | syscall.NOTE_EXTEND | syscall.NOTE_DELETE | syscall.NOTE_RENAME

// probeWatch reports whether dir can be watched, by opening it and a
// kqueue; its release closes the directory.
func probeWatch(dir string) (release func(), err error) {
	kq, err := syscall.Kqueue()
	if err != nil {
		return nil, fmt.Errorf("kqueue: %w", err)
	}
	syscall.Close(kq)
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return func() { syscall.Close(fd) }, nil
}

// watchDirectory watches dir with kqueue and calls emit with the name of
// each file that changed.
func watchDirectory(dir string, emit func(name string)) (_ fileWatch, err error) {
	k := &kqueueWatch{dir: dir, emit: emit, files: map[int]string{}, wals: map[string]int{}, dbs: map[string]bool{}}
	if k.kq, err = syscall.Kqueue(); err != nil {
		return nil, fmt.Errorf("kqueue: %w", err)
	}
	syscall.CloseOnExec(k.kq)
	if err = syscall.Pipe(k.wake[:]); err != nil {
		syscall.Close(k.kq)
		return nil, fmt.Errorf("pipe: %w", err)
	}
	syscall.CloseOnExec(k.wake[0])
	syscall.CloseOnExec(k.wake[1])
	if k.dirfd, err = syscall.Open(dir, syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
		err = k.add(k.dirfd, syscall.EVFILT_VNODE, kqueueVnodeFlags)
	}
	if err == nil {
		err = k.add(k.wake[0], syscall.EVFILT_READ, 0)
	}
	if err != nil {
		k.closeAll()
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	k.rescan(false)
	k.loops.Go(k.loop)
	return k, nil
}

// stop ends the watch, waits for its goroutine and only then closes the
// descriptors: closed by a loop that failed, a reused number would take
// stop's wake byte.
func (k *kqueueWatch) stop() {
	syscall.Write(k.wake[1], []byte{0})
	k.loops.Wait()
	k.closeAll()
}

// add registers fd with the kqueue.
func (k *kqueueWatch) add(fd int, filter int, fflags uint32) error {
	var ev syscall.Kevent_t
	syscall.SetKevent(&ev, fd, filter, syscall.EV_ADD|syscall.EV_ENABLE|syscall.EV_CLEAR)
	ev.Fflags = fflags
	_, err := syscall.Kevent(k.kq, []syscall.Kevent_t{ev}, nil, nil)
	return err
}

// loop handles events until the wake pipe is written, pausing after each
// batch (watchPacer).
func (k *kqueueWatch) loop() {
	events := make([]syscall.Kevent_t, 32)
	var pacer watchPacer
	for {
		start := time.Now()
		n, err := syscall.Kevent(k.kq, nil, events, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range events[:n] {
			fd := int(ev.Ident)
			switch fd {
			case k.wake[0]:
				return
			case k.dirfd:
				k.rescan(true)
			default:
				name, ok := k.files[fd]
				if !ok {
					continue
				}
				k.emit(name)
				if ev.Fflags&(syscall.NOTE_DELETE|syscall.NOTE_RENAME) != 0 {
					k.drop(fd)
					k.rescan(true)
				}
			}
		}
		pacer.sleep(time.Since(start))
	}
}

// rescan lists the directory, watches new -wal files and, when announce is
// set, reports group files that appeared or went away.
func (k *kqueueWatch) rescan(announce bool) {
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		k.emit("")
		return
	}
	seenDB := map[string]bool{}
	seenWAL := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if _, ok := groupOfFile(name); !ok {
			continue
		}
		switch {
		case strings.HasSuffix(name, ".sqlite3"):
			seenDB[name] = true
			if announce && !k.dbs[name] {
				k.emit(name)
			}
		case strings.HasSuffix(name, "-wal"):
			seenWAL[name] = true
			if _, ok := k.wals[name]; !ok {
				k.watchWAL(name)
			}
		}
	}
	for name := range k.dbs {
		if !seenDB[name] && announce {
			k.emit(name)
		}
	}
	for name, fd := range k.wals {
		if !seenWAL[name] {
			k.drop(fd)
		}
	}
	k.dbs = seenDB
}

// watchWAL starts watching one -wal file. Its appearance is not announced,
// lest a poller's own opens wake it in a loop; a commit written before the
// watch is caught by the consumers' safety poll.
func (k *kqueueWatch) watchWAL(name string) {
	fd, err := syscall.Open(k.dir+string(os.PathSeparator)+name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	if k.add(fd, syscall.EVFILT_VNODE, kqueueVnodeFlags) != nil {
		syscall.Close(fd)
		return
	}
	k.files[fd], k.wals[name] = name, fd
}

// drop stops watching one -wal file; closing the descriptor removes it from
// the kqueue.
func (k *kqueueWatch) drop(fd int) {
	delete(k.wals, k.files[fd])
	delete(k.files, fd)
	syscall.Close(fd)
}

// closeAll releases every descriptor of the watch.
func (k *kqueueWatch) closeAll() {
	for fd := range k.files {
		syscall.Close(fd)
	}
	for _, fd := range []int{k.dirfd, k.wake[0], k.wake[1], k.kq} {
		if fd > 0 {
			syscall.Close(fd)
		}
	}
}
