package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// combineListener is a leader's hold on a group's rendezvous (combineSend):
// a listening socket kept out of Go's network poller, as every send of an
// uncontended group binds one. A leader serving in the background waits on
// it with ppoll (waiting).
type combineListener struct{ fd int } // -1 once closed

// combineAvailable reports whether this platform has the rendezvous: Linux's
// abstract socket namespace, whose names leave no file behind.
const combineAvailable = true

// combineName is the rendezvous of group id's file: abstract ("@"), with the
// protocol's version, and with the file's device and inode, so that two
// directories holding a copy of one group, or a group deleted and created
// again, never share a leader.
func combineName(id string, info os.FileInfo) string {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("@crosstalk-send-v1/%s/%d/%d", id, st.Dev, st.Ino)
}

// listenCombiner binds name, or returns nil when another process holds it.
func listenCombiner(name string) *combineListener {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	if syscall.Bind(fd, &syscall.SockaddrUnix{Name: name}) != nil || syscall.Listen(fd, syscall.SOMAXCONN) != nil {
		syscall.Close(fd)
		return nil
	}
	return &combineListener{fd: fd}
}

// close gives the name up. A connection made but not yet accepted is
// dropped, and its follower, which cannot tell that from a leader that
// died, looks for its messages before writing them; release is the way
// out that spares it that.
func (l *combineListener) close() {
	if l.fd >= 0 {
		syscall.Close(l.fd)
		l.fd = -1
	}
}

// release refuses the followers waiting, so that they send again at once,
// and gives the name up. One that connects in between is dropped (close).
func (l *combineListener) release() {
	for conn := l.accept(); conn != nil; conn = l.accept() {
		refuse(conn)
	}
	l.close()
}

// waiting reports whether a follower's connection is waiting on l, waiting
// up to d for one to come.
func (l *combineListener) waiting(d time.Duration) bool {
	return l.fd >= 0 && pollFd(l.fd, pollIn, d)&pollIn != 0
}

// accept returns a follower's connection that is already waiting, or nil.
// A leader holds the write lock, so it never waits for a follower to come.
func (l *combineListener) accept() *followerConn {
	for l.fd >= 0 {
		nfd, _, err := syscall.Accept4(l.fd, syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK)
		if err == syscall.EINTR || err == syscall.ECONNABORTED {
			continue
		}
		if err != nil {
			return nil // EAGAIN: nobody is waiting
		}
		if peerIsUser(nfd) {
			return &followerConn{fd: nfd}
		}
		syscall.Close(nfd)
	}
	return nil
}

// followerConn is a follower's connection as its leader holds it: a
// non-blocking descriptor waited on with ppoll, like the listener, rather
// than a net.Conn. A leader takes a connection from each follower in every
// round, and making each a net.Conn (a duplicate descriptor, registered
// with Go's network poller, and its addresses looked up) cost about
// 0.15 ms a follower, with the write lock held. Reads and writes give up
// at deadline.
type followerConn struct {
	fd       int // -1 once closed
	deadline time.Time
}

// Read reads what the follower has written, waiting for it until deadline.
func (c *followerConn) Read(b []byte) (int, error) {
	for {
		n, err := syscall.Read(c.fd, b)
		switch {
		case err == syscall.EINTR:
		case err == syscall.EAGAIN:
			if pollFd(c.fd, pollIn, time.Until(c.deadline)) == 0 {
				return 0, os.ErrDeadlineExceeded
			}
		case err != nil:
			return 0, err
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		default:
			return n, nil
		}
	}
}

// Write writes b whole to the follower, waiting for room until deadline.
func (c *followerConn) Write(b []byte) (int, error) {
	done := 0
	for done < len(b) {
		n, err := syscall.Write(c.fd, b[done:])
		switch {
		case err == syscall.EINTR:
		case err == syscall.EAGAIN:
			if pollFd(c.fd, pollOut, time.Until(c.deadline)) == 0 {
				return done, os.ErrDeadlineExceeded
			}
		case err != nil:
			return done, err
		default:
			done += n
		}
	}
	return done, nil
}

// close closes the connection; the follower reads end-of-file.
func (c *followerConn) close() {
	if c.fd >= 0 {
		syscall.Close(c.fd)
		c.fd = -1
	}
}

// stillOpen reports whether the follower has not closed its end: a peek
// that finds nothing to read (EAGAIN) rather than end-of-file or an error.
// It wakes nobody, unlike a write.
func (c *followerConn) stillOpen() bool {
	var b [1]byte
	for {
		n, _, err := syscall.Recvfrom(c.fd, b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err != syscall.EINTR {
			return n > 0 || err == syscall.EAGAIN
		}
	}
}

// dialCombiner connects to the leader holding name, or returns nil when
// there is none (or it is not this user's).
func dialCombiner(name string) net.Conn {
	conn, err := net.Dial("unix", name)
	if err != nil {
		return nil
	}
	if !sameUser(conn) {
		conn.Close()
		return nil
	}
	return conn
}

// sameUser reports whether the process at the other end of conn runs as
// this process's user. Abstract names have no file permissions, so this is
// the check: a leader stores what its followers send, and a follower
// believes what its leader answers.
func sameUser(conn net.Conn) bool {
	same := false
	ok := controlConn(conn, func(fd int) { same = peerIsUser(fd) })
	return ok && same
}

// peerIsUser is sameUser on the descriptor of a Unix socket.
func peerIsUser(fd int) bool {
	cred, err := syscall.GetsockoptUcred(fd, syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	return err == nil && cred.Uid == uint32(os.Geteuid())
}

// controlConn runs fn on the descriptor of conn, a Unix socket, and reports
// whether it could.
func controlConn(conn net.Conn, fn func(fd int)) bool {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return false
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) }) == nil
}

// The poll(2) events pollFd waits for.
const (
	pollIn  = 0x1 // POLLIN: a connection to accept, or bytes to read
	pollOut = 0x4 // POLLOUT: room to write
)

// pollFd waits up to d (not at all if d <= 0) for events on fd and returns
// those that came, with any error or hang-up, or 0 when none came in time.
// It calls ppoll, which the syscall package does not wrap; the thread
// blocks in it, as in any system call.
func pollFd(fd int, events int16, d time.Duration) int16 {
	deadline := time.Now().Add(d)
	for {
		fds := struct {
			fd      int32
			events  int16
			revents int16
		}{fd: int32(fd), events: events}
		ts := syscall.NsecToTimespec(int64(max(time.Until(deadline), 0)))
		_, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		if errno != syscall.EINTR {
			return fds.revents
		}
	}
}
