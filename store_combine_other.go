//go:build !linux

package main

import (
	"io"
	"net"
	"os"
	"time"
)

// combineListener is a leader's hold on a group's rendezvous; this platform
// has none (see combineAvailable), so sends go the plain way.
type combineListener struct{}

// followerConn is a follower's connection as its leader holds it; there
// are none here.
type followerConn struct{ deadline time.Time }

// combineAvailable reports whether this platform has the rendezvous of
// combined sends, Linux's abstract sockets.
const combineAvailable = false

func combineName(string, os.FileInfo) string        { return "" }
func listenCombiner(string) *combineListener        { return nil }
func (*combineListener) close()                     {}
func (*combineListener) release()                   {}
func (*combineListener) waiting(time.Duration) bool { return false }
func (*combineListener) accept() *followerConn      { return nil }
func dialCombiner(string) net.Conn                  { return nil }
func (*followerConn) Read([]byte) (int, error)      { return 0, io.EOF }
func (*followerConn) Write(b []byte) (int, error)   { return 0, io.ErrClosedPipe }
func (*followerConn) close()                        {}
func (*followerConn) stillOpen() bool               { return false }
