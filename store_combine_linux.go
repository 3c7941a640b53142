package main

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// combineListener is a leader's hold on a group's rendezvous (combineSend):
// a listening socket that is never waited on, so it stays out of Go's
// network poller (every send of an uncontended group binds one).
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
// died, looks for its messages before writing them.
func (l *combineListener) close() {
	if l.fd >= 0 {
		syscall.Close(l.fd)
		l.fd = -1
	}
}

// accept returns a follower's connection that is already waiting, or nil.
// A leader holds the write lock, so it never waits for a follower to come.
func (l *combineListener) accept() net.Conn {
	for l.fd >= 0 {
		nfd, _, err := syscall.Accept4(l.fd, syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK)
		if err == syscall.EINTR || err == syscall.ECONNABORTED {
			continue
		}
		if err != nil {
			return nil // EAGAIN: nobody is waiting
		}
		f := os.NewFile(uintptr(nfd), "follower")
		conn, err := net.FileConn(f)
		f.Close()
		if err != nil {
			continue
		}
		if sameUser(conn) {
			return conn
		}
		conn.Close()
	}
	return nil
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
	var cred *syscall.Ucred
	var err error
	ok := controlConn(conn, func(fd int) {
		cred, err = syscall.GetsockoptUcred(fd, syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	return ok && err == nil && cred.Uid == uint32(os.Geteuid())
}

// stillOpen reports whether the follower at the other end of conn has not
// closed it: a peek that finds nothing to read (EAGAIN) rather than
// end-of-file or an error. It wakes nobody, unlike a write.
func stillOpen(conn net.Conn) bool {
	open := false
	ok := controlConn(conn, func(fd int) {
		var b [1]byte
		for {
			n, _, err := syscall.Recvfrom(fd, b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err != syscall.EINTR {
				open = n > 0 || err == syscall.EAGAIN
				return
			}
		}
	})
	return ok && open
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
