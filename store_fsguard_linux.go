package main

import "syscall"

// linuxNetworkFS names the statfs f_type magic numbers of network and
// user-space filesystems (linux/magic.h and fs/smb/client).
var linuxNetworkFS = map[uint32]string{
	0x6969:     "NFS",
	0x517b:     "SMB",
	0xff534d42: "SMB/CIFS",
	0xfe534d42: "SMB2",
	0x65735546: "FUSE",
}

// networkFSKind names the network filesystem path is on, or "" for a local
// one or when statfs fails (the warning is advice, not a check to pass).
func networkFSKind(path string) string {
	var st syscall.Statfs_t
	if syscall.Statfs(path, &st) != nil {
		return ""
	}
	return linuxNetworkFS[uint32(st.Type)]
}
