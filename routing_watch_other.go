//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly

package main

import "errors"

// errWatchUnsupported says this platform has no file-system events here;
// consumers of changeWatcher then poll, as the original always does.
var errWatchUnsupported = errors.New("no file-system events on this platform")

// watchDirectory is unavailable on this platform.
func watchDirectory(string, func(string)) (fileWatch, error) {
	return nil, errWatchUnsupported
}

// probeWatch says this platform has no file-system events.
func probeWatch(string) (func(), error) {
	return nil, errWatchUnsupported
}
