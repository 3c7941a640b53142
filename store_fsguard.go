package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// networkFSWarning returns the warning for a groups directory on a network
// filesystem (NFS, SMB/CIFS, FUSE), whose locks and shared memory SQLite's
// WAL mode cannot rely on, or "" when it is local, when the platform cannot
// tell, or when CROSSTALK_ALLOW_NETWORK_FS=1 silences it.
func networkFSWarning(dir string, getenv func(string) string) string {
	return networkFSWarningOn(dir, networkFSKind(existingAncestor(dir)), getenv("CROSSTALK_ALLOW_NETWORK_FS") == "1")
}

// networkFSWarningOn is the warning for dir on the filesystem kind names
// ("" when local), unless allowed.
func networkFSWarningOn(dir, kind string, allowed bool) string {
	if kind == "" || allowed {
		return ""
	}
	return fmt.Sprintf("warning: the groups directory %s is on %s, a network filesystem. SQLite's WAL mode needs "+
		"shared memory and file locks that network filesystems do not provide reliably, so messages can be lost "+
		"or group databases corrupted. Keep the groups directory on a local disk and let agents on other machines "+
		"connect to `crosstalk-mcp serve --http` (README: \"Across machines\"). "+
		"Set CROSSTALK_ALLOW_NETWORK_FS=1 to silence this warning.", dir, kind)
}

// existingAncestor returns dir, or its nearest ancestor that exists: the
// directory is created lazily, and its filesystem is its parent's.
func existingAncestor(dir string) string {
	dir = filepath.Clean(dir)
	for {
		if _, err := os.Stat(dir); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}
