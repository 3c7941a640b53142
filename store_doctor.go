package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// logf reports on stderr a failure that has no caller to return it to:
// stderr is the only place the stdio transport may write besides answers.
func logf(format string, args ...any) { log.Printf(format, args...) }

// doctorFinding is one file in the groups directory that no server can use:
// a group file that is no database or lacks the group schema (a crash inside
// the original's create_group), or the remains of an interrupted build.
type doctorFinding struct {
	name    string // file name in the groups directory
	problem string
	keep    string // why --repair leaves it in place, or ""
}

// doctorGracePeriod is how old a file must be before doctor --repair moves
// it: the original fills a group a few milliseconds after creating it under
// its final name, so a younger table-less file may be one in the making.
const doctorGracePeriod = time.Minute

// damagedDirName is the folder, inside the groups directory, that doctor
// --repair moves unusable files into. Nothing is ever deleted.
const damagedDirName = "damaged"

// requiredGroupTables are the tables every group database has once its
// schema is committed; a file without them is not a usable group. Not
// message_search: the original leaves it out where SQLite lacks FTS5.
var requiredGroupTables = []string{"messages", "group_metadata", "group_members",
	"member_unread_messages", "wakeup_events", "group_state"}

// checkGroupFile reports why the group database at path cannot be used, or
// nil when it opens and has the group schema. It only reads: the file is
// opened read-only, and never with os.Open (closing a descriptor would drop
// this process's POSIX locks on the file, which SQLite's own connections hold). The dashboard calls it to
// show a group as damaged.
func checkGroupFile(path string) error {
	db := openSQLite(readOnlyDSN(path), 1)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tables, err := tableNames(ctx, db)
	if err != nil {
		if isBusy(err) {
			return nil // locked by a writer: it is in use, so not damaged
		}
		return fmt.Errorf("cannot read: %w", err)
	}
	missing := slices.DeleteFunc(slices.Clone(requiredGroupTables), func(t string) bool { return tables[t] })
	if len(missing) > 0 {
		return fmt.Errorf("no group schema (missing %s)", strings.Join(missing, ", "))
	}
	return nil
}

// damagedWarnings remembers which damaged group files this process already
// reported, so that list_groups, polled by agents, warns once per file.
type damagedWarnings struct{ seen sync.Map } // path → true

// warn writes one stderr line for path the first time it is reported, and
// none while the file is younger than doctorGracePeriod: the original's
// create_group adds its tables milliseconds after the file appears, and
// doctor spares such a file too.
func (w *damagedWarnings) warn(path string, problem error) {
	if info, err := os.Stat(path); err == nil && time.Since(info.ModTime()) < doctorGracePeriod {
		return
	}
	if _, reported := w.seen.LoadOrStore(path, true); !reported {
		logf("skipping damaged group file %s: %v (run `crosstalk-mcp doctor --repair` to move it aside)", filepath.Base(path), problem)
	}
}

// doctorScan checks every group file and leftover build in dir, in name order.
func doctorScan(dir string, now time.Time) ([]doctorFinding, int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	var findings []doctorFinding
	checked := 0
	for _, e := range entries {
		name := e.Name()
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		var keep string
		if now.Sub(info.ModTime()) < doctorGracePeriod {
			keep = fmt.Sprintf("changed less than %v ago (it may still be being created)", doctorGracePeriod)
		}
		if _, ok := groupIDOfFile(name); ok {
			checked++
			// Read-only is this user's lack of -wal and -shm files, not damage.
			if problem := checkGroupFile(filepath.Join(dir, name)); problem != nil && !isReadOnly(problem) {
				// A file this user cannot open may be another user's healthy group.
				if f, err := os.Open(filepath.Join(dir, name)); errors.Is(err, fs.ErrPermission) {
					keep = "this user cannot open it (it may be another user's healthy group)"
				} else if errors.Is(err, fs.ErrNotExist) {
					continue // deleted while it was checked: no damage
				} else if err == nil {
					f.Close()
				}
				findings = append(findings, doctorFinding{name, problem.Error(), keep})
			}
		} else if strings.HasPrefix(name, buildingPrefix) && strings.HasSuffix(name, ".sqlite3") {
			findings = append(findings, doctorFinding{name, "an interrupted create_group", keep})
		}
	}
	return findings, checked, nil
}

// moveAside moves a database file and its sidecars into dir/damaged/,
// choosing a free name there so that nothing already moved is overwritten.
func moveAside(dir, name string) (string, error) {
	target := filepath.Join(dir, damagedDirName)
	// Through a symlink the files would leave the groups directory.
	if info, err := os.Lstat(target); err == nil && !info.IsDir() {
		return "", fmt.Errorf("%s is not a directory", target)
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return "", err
	}
	// A name is free when none of its files is there: a sidecar may outlive
	// its main file (taken back out, say), and a rename would replace it.
	suffixes := []string{"", "-wal", "-shm", "-journal"}
	taken := func(dest string) bool {
		return slices.ContainsFunc(suffixes, func(s string) bool {
			_, err := os.Lstat(filepath.Join(target, dest+s))
			return !errors.Is(err, os.ErrNotExist)
		})
	}
	dest := name
	for i := 1; taken(dest); i++ {
		dest = fmt.Sprintf("%s.%d", name, i)
	}
	// The main file goes first: once it is gone no server lists the group,
	// and a sidecar left by a failure below is harmless.
	for _, suffix := range suffixes {
		err := os.Rename(filepath.Join(dir, name+suffix), filepath.Join(target, dest+suffix))
		if err != nil && !(suffix != "" && errors.Is(err, os.ErrNotExist)) {
			return "", err
		}
	}
	syncDir(dir)
	return filepath.Join(damagedDirName, dest), nil
}

// readOnlyDSN opens path with mode=ro, which never creates a file, and
// query_only, so no statement can write. The busy timeout stays short: the
// dashboard skips a locked group until its next poll. _txlock affects only
// db.Begin, which the dashboard's read-only handles never call.
func readOnlyDSN(path string) string {
	return sqliteDSN(path, "ro") + "&" + url.Values{"_pragma": {"query_only(1)"}}.Encode()
}
