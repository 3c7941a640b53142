//go:build !linux && !darwin

package main

// networkFSKind cannot tell filesystem types on this platform, so the
// network filesystem warning is never given here.
func networkFSKind(path string) string { return "" }
