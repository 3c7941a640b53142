//go:build !linux

package main

import (
	"net"
	"os"
)

// combineListener is a leader's hold on a group's rendezvous; this platform
// has none (see combineAvailable), so sends go the plain way.
type combineListener struct{}

// combineAvailable reports whether this platform has the rendezvous of
// combined sends, Linux's abstract sockets.
const combineAvailable = false

func combineName(string, os.FileInfo) string { return "" }
func listenCombiner(string) *combineListener { return nil }
func (*combineListener) close()              {}
func (*combineListener) accept() net.Conn    { return nil }
func dialCombiner(string) net.Conn           { return nil }
func stillOpen(net.Conn) bool                { return false }
