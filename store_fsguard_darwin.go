package main

import (
	"strings"
	"syscall"
)

// networkFSKind names the network filesystem path is on, from statfs's
// f_fstypename, or "" for a local one or when statfs fails.
func networkFSKind(path string) string {
	var st syscall.Statfs_t
	if syscall.Statfs(path, &st) != nil {
		return ""
	}
	b := make([]byte, 0, len(st.Fstypename))
	for _, c := range st.Fstypename {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	switch name := string(b); {
	case name == "nfs":
		return "NFS"
	case name == "smbfs" || name == "cifs":
		return "SMB/CIFS"
	case strings.Contains(name, "fuse"):
		return "FUSE"
	}
	return ""
}
