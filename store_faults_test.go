package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// mountTmpfs mounts a tmpfs of size bytes on a new temporary directory and
// unmounts it when the test ends. Mounting needs root on Linux; elsewhere the
// test is skipped with the reason, because a full or read-only file system
// cannot be simulated faithfully any other way (root ignores file modes).
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs root on Linux to mount a tmpfs (disk-full and read-only faults)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s); run as root with mount rights", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// remount switches the tmpfs at dir to mode "ro" or "rw".
func remount(t *testing.T, dir, mode string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,"+mode, dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s %s: %v: %s", dir, mode, err, out)
	}
}

// captureLog sends the package logger's output to a buffer for the test.
func captureLog(t *testing.T) *syncBuffer {
	t.Helper()
	var buf syncBuffer
	log.SetOutput(&buf)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	return &buf
}

func testMessage(text string) outgoing {
	return outgoing{contextID: "alice", name: "Alice", text: text, priority: "normal"}
}

// TestReadOnlyRecovery shows that a group, the catalog and the audit
// database first opened while the file system is read-only become writable
// again, in the same process, as soon as the file system is: SQLite opens a
// file it cannot write read-only and keeps that handle read-only forever, so
// the store must drop such a handle rather than reuse it.
func TestReadOnlyRecovery(t *testing.T) {
	dir := mountTmpfs(t, 16<<20)
	first, err := newStore(dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := first.createGroup("alice", "team", "")
	if err != nil {
		t.Fatal(err)
	}
	g := meta.groupID
	if err := first.joinGroup(g, "alice", "Alice"); err != nil {
		t.Fatal(err)
	}
	audit := openAuditLog(dir, auditConfig{enabled: true}, &syncBuffer{}, time.Now)
	audit.close()
	first.close() // a read-only remount needs every file closed for writing
	remount(t, dir, "ro")

	st := newTestStore(t, dir)
	if _, err := st.sendMessage(g, testMessage("while read-only")); err == nil {
		t.Fatal("send on a read-only file system: got success; want an error")
	}
	if _, err := st.listGroups(); err != nil {
		t.Logf("list_groups while read-only: %v", err) // opening the catalog may fail too
	}
	warn := &syncBuffer{}
	audit = openAuditLog(dir, auditConfig{enabled: true}, warn, time.Now)
	defer audit.close()
	audit.observe(toolCall{name: "list_groups", started: time.Now(), result: toolResult{value: object{{"groups", []any{}}}}})
	auditFlush(t, audit)

	remount(t, dir, "rw")
	if _, err := st.sendMessage(g, testMessage("after recovery")); err != nil {
		t.Fatalf("send after the file system is writable again: got %v; want success", err)
	}
	created, err := st.createGroup("alice", "second", "")
	if err != nil {
		t.Fatalf("create_group after recovery: %v", err)
	}
	cat := openTestDB(t, filepath.Join(dir, catalogFileName), "ro")
	if n := queryInt(t, cat, "SELECT COUNT(*) FROM groups WHERE group_id = ?", created.groupID); n != 1 {
		t.Errorf("catalog rows for the group created after recovery: got %d; want 1", n)
	}
	audit.observe(toolCall{name: "list_groups", started: time.Now(), result: toolResult{value: object{{"groups", []any{}}}}})
	auditFlush(t, audit)
	if n := observabilityInt(t, dir, "SELECT COUNT(*) FROM tool_calls"); n != 1 {
		t.Errorf("audit rows written after recovery: got %d; want 1 (the call made while read-only is lost)", n)
	}
	db := openTestDB(t, groupFile(dir, g), "ro")
	if got := queryRows(t, db, "SELECT content FROM messages"); len(got) != 1 || !strings.Contains(got[0], "after recovery") {
		t.Errorf("stored messages: got %v; want only the one sent after recovery", got)
	}
}

// TestDiskFullRecovery fills a small file system: the send that does not fit
// fails with nothing half-written, and once space is freed the next send
// succeeds and the database passes its integrity checks.
func TestDiskFullRecovery(t *testing.T) {
	dir := mountTmpfs(t, 4<<20)
	st := newTestStore(t, dir)
	meta, err := st.createGroup("alice", "team", "")
	if err != nil {
		t.Fatal(err)
	}
	g := meta.groupID
	if err := st.joinGroup(g, "alice", "Alice"); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = st.sendMessage(g, testMessage(strings.Repeat("full disk ", 200_000)))
	if err == nil {
		t.Fatal("a 2 MB send on a nearly full 4 MiB file system: got success; want disk full")
	}
	if te := classify("send_message", err); te.category != categoryInternal || !strings.Contains(te.msg, "full") {
		t.Errorf("disk full: got %q (%s); want an internal error saying the disk is full", te.msg, te.category)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := st.sendMessage(g, testMessage("after freeing space")); err != nil {
		t.Fatalf("send after freeing space: got %v; want success", err)
	}
	db := openTestDB(t, groupFile(dir, g), "ro")
	if got := queryRows(t, db, "SELECT id || ':' || substr(content, 1, 20) FROM messages"); len(got) != 1 || got[0] != "1:after freeing space" {
		t.Errorf("stored messages: got %v; want only the send after freeing space", got)
	}
	if got := queryRows(t, db, "PRAGMA integrity_check"); len(got) != 1 || got[0] != "ok" {
		t.Errorf("integrity_check: got %v; want ok", got)
	}
}

// TestDiskFullOnFirstOpen fills a file system to its last byte while no
// process has the group open, so that SQLite cannot size the group's new
// -shm file and reports "disk I/O error": the agent is still told that the
// disk is full, as README's failure table promises, and once space is freed
// the next send succeeds.
func TestDiskFullOnFirstOpen(t *testing.T) {
	dir := mountTmpfs(t, 4<<20)
	first := newTestStore(t, dir)
	g := newTestGroup(t, first, "team", "alice")
	first.close() // the last connection removes the -wal and -shm files
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = filler.Write(make([]byte, 4096))
	}
	filler.Close()
	st := newTestStore(t, dir)
	m := outgoing{contextID: "alice", name: "alice", text: "no room", priority: "normal"}
	_, err = st.sendMessage(g, m)
	if te := classify("send_message", err); err == nil || !strings.Contains(te.msg, "disk is full") {
		t.Errorf("send on a full disk: got %v (%q); want an error saying the disk is full", err, te.msg)
	}
	if err := os.Remove(filler.Name()); err != nil {
		t.Fatal(err)
	}
	m.text = "after freeing space"
	if _, err := st.sendMessage(g, m); err != nil {
		t.Errorf("send after freeing space: got %v; want success", err)
	}
}

// TestFailedCreateLeavesNoGroup creates groups on a file system with less
// and less room left: a create_group that fails leaves no group behind,
// whichever step ran out of room (the build, or opening the new group to
// read its metadata back), so a client that retries does not end up with
// two groups.
func TestFailedCreateLeavesNoGroup(t *testing.T) {
	dir := mountTmpfs(t, 4<<20)
	st := newTestStore(t, dir)
	created := 0
	for free := 0; free <= 96<<10; free += 4 << 10 {
		filler, err := os.Create(filepath.Join(dir, "filler"))
		if err != nil {
			t.Fatal(err)
		}
		for err == nil {
			_, err = filler.Write(make([]byte, 4096))
		}
		info, _ := filler.Stat()
		filler.Truncate(info.Size() - int64(free))
		filler.Close()
		_, err = st.createGroup("alice", "team", "")
		if err := os.Remove(filler.Name()); err != nil {
			t.Fatal(err)
		}
		groups, lerr := st.listGroups()
		if lerr != nil {
			t.Fatal(lerr)
		}
		if err == nil {
			created++
		}
		if len(groups) != created {
			t.Errorf("%d KiB free: create_group answered %v; got %d groups listed; want %d", free>>10, err, len(groups), created)
			created = len(groups)
		}
	}
	if created == 0 {
		t.Errorf("no create_group succeeded with up to 96 KiB free; want the range to reach a success")
	}
}

// TestBuildGroupFile shows that a group file gets its final name complete,
// in WAL mode and with no sidecar files, and that a failed build leaves
// nothing behind.
func TestBuildGroupFile(t *testing.T) {
	dir := t.TempDir()
	id := "grp_" + randomHex(16)
	err := buildGroupFile(dir, id, func(tx *sql.Tx) error {
		_, err := tx.Exec("CREATE TABLE t(x)")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{id + ".sqlite3"}; !equalNames(names, want) {
		t.Errorf("files after a build: got %v; want %v", names, want)
	}
	db := openTestDB(t, groupFile(dir, id), "ro")
	if got := queryRows(t, db, "PRAGMA journal_mode"); len(got) != 1 || got[0] != "wal" {
		t.Errorf("journal_mode: got %v; want wal", got)
	}
	st := newTestStore(t, dir)
	meta, err := st.createGroup("alice", "team", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkGroupFile(groupFile(dir, meta.groupID)); err != nil {
		t.Errorf("checkGroupFile of a new group: %v", err)
	}

	failing := "grp_" + strings.Repeat("ab", 16)
	err = buildGroupFile(dir, failing, func(tx *sql.Tx) error {
		if _, err := tx.Exec("CREATE TABLE t(x)"); err != nil {
			return err
		}
		return errors.New("fill failed")
	})
	if err == nil {
		t.Fatal("buildGroupFile with a failing fill: got nil; want its error")
	}
	for _, p := range []string{groupFile(dir, failing), buildingPath(dir, failing), buildingPath(dir, failing) + "-journal"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after a failed build: got %v; want it absent", filepath.Base(p), err)
		}
	}
}

// equalNames compares file names, ignoring the listed extras.
func equalNames(got, want []string, ignore ...string) bool {
	var kept []string
	for _, n := range got {
		if !strings.Contains(strings.Join(ignore, "\x00"), n) {
			kept = append(kept, n)
		}
	}
	return strings.Join(kept, ",") == strings.Join(want, ",")
}

// makeTablelessGroup leaves what a kill -9 inside the original's
// create_group leaves: a group file in WAL mode without its schema.
func makeTablelessGroup(t *testing.T, dir string) string {
	t.Helper()
	id := "grp_" + randomHex(16)
	db, err := sql.Open("sqlite", sqliteDSN(groupFile(dir, id), "rwc"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA journal_mode=WAL"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	return id
}

// agePastGrace sets the files' times to twice doctorGracePeriod ago, so that
// doctor and the damaged-file warning no longer take them for files being
// created.
func agePastGrace(t *testing.T, paths ...string) {
	t.Helper()
	old := time.Now().Add(-2 * doctorGracePeriod)
	for _, p := range paths {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDamagedGroupsAreSkipped shows that a table-less group file is left out
// of list_groups and resources/list with one warning on stderr, instead of
// being listed forever as a group on which every tool fails. A file changed
// within doctorGracePeriod is skipped without a warning: the original's
// create_group adds the tables milliseconds after the file appears.
func TestDamagedGroupsAreSkipped(t *testing.T) {
	logs := captureLog(t)
	s, _ := newTestServer(t)
	initializeSession(t, s)
	good := mustCreateGroup(t, s, "alice")
	bad := makeTablelessGroup(t, s.store.dir)
	agePastGrace(t, groupFile(s.store.dir, bad))
	fresh := "grp_" + strings.Repeat("0", 31) + "1"
	if err := os.WriteFile(groupFile(s.store.dir, fresh), []byte("not a database at all, not at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		out := mustCall(t, s, "list_groups", map[string]any{})
		groups := out["groups"].([]any)
		if len(groups) != 1 || groups[0].(map[string]any)["group_id"] != good {
			t.Fatalf("list_groups: got %v; want only %s", groups, good)
		}
		res := exchangeLine(t, s, `{"jsonrpc":"2.0","id":5,"method":"resources/list"}`)
		if strings.Contains(res, bad) || !strings.Contains(res, good) {
			t.Fatalf("resources/list: got %s; want %s without %s", res, good, bad)
		}
	}
	if n := strings.Count(logs.String(), bad); n != 1 {
		t.Errorf("warnings naming %s: got %d in %q; want exactly 1", bad, n, logs.String())
	}
	if strings.Contains(logs.String(), fresh) {
		t.Errorf("got a warning for %s, written just now: %q; want none", fresh, logs.String())
	}
	if err := checkGroupFile(groupFile(s.store.dir, bad)); err == nil {
		t.Errorf("checkGroupFile of a table-less file: got nil; want an error")
	}
}

// TestDoctor shows that doctor lists unusable group files and interrupted
// builds, leaves recent ones alone, and with --repair moves the others into
// damaged/ with their sidecars, never touching a healthy group.
func TestDoctor(t *testing.T) {
	dir := t.TempDir()
	st := newTestStore(t, dir)
	good, err := st.createGroup("alice", "team", "")
	if err != nil {
		t.Fatal(err)
	}
	bad := makeTablelessGroup(t, dir)
	leftover := buildingPath(dir, "grp_"+randomHex(16))
	if err := os.WriteFile(leftover, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := runDoctor(append(args, "--groups-dir", dir), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	code, out := run()
	if code != 1 || !strings.Contains(out, bad) || !strings.Contains(out, filepath.Base(leftover)) || strings.Contains(out, good.groupID) {
		t.Fatalf("doctor: got exit %d, %q; want exit 1 listing %s and the leftover build only", code, out, bad)
	}
	code, out = run("--repair")
	if code != 1 || !strings.Contains(out, "left in place") {
		t.Fatalf("doctor --repair on fresh files: got exit %d, %q; want them left in place, exit 1", code, out)
	}
	agePastGrace(t, groupFile(dir, bad), leftover)
	code, out = run("--repair")
	if code != 0 {
		t.Fatalf("doctor --repair: got exit %d, %q; want 0", code, out)
	}
	for _, p := range []string{filepath.Join(dir, damagedDirName, bad+".sqlite3"), filepath.Join(dir, damagedDirName, filepath.Base(leftover))} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("moved file %s: %v", p, err)
		}
	}
	if _, err := os.Stat(groupFile(dir, bad)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("damaged group after repair: got %v; want it moved away", err)
	}
	if err := checkGroupFile(groupFile(dir, good.groupID)); err != nil {
		t.Errorf("healthy group after repair: %v", err)
	}
	if code, out = run(); code != 0 || !strings.HasPrefix(out, "1 group file checked in ") {
		t.Errorf("doctor after repair: got exit %d, %q; want 0 and \"1 group file checked\"", code, out)
	}
}

// TestDoctorLeavesUnreadableGroup shows that doctor --repair leaves in place
// a group file the user running it cannot open: in a shared directory it may
// be another user's healthy group, which its owner's servers still use.
// Root opens every file, so the test needs another user.
func TestDoctorLeavesUnreadableGroup(t *testing.T) {
	if runtime.GOOS == "windows" || os.Geteuid() == 0 {
		t.Skip("needs a user that file modes apply to")
	}
	dir := t.TempDir()
	st := newTestStore(t, dir)
	path := groupFile(dir, newTestGroup(t, st, "team", "alice"))
	st.close()
	old := time.Now().Add(-2 * doctorGracePeriod)
	if err := errors.Join(os.Chtimes(path, old, old), os.Chmod(path, 0)); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(path, 0o644)
	var out bytes.Buffer
	code := runDoctor([]string{"--repair", "--groups-dir", dir}, &out, &out)
	if _, err := os.Stat(path); err != nil || code != 1 || !strings.Contains(out.String(), "left in place") {
		t.Errorf("doctor --repair on a group this user cannot open: got exit %d, %q, stat %v; want it left in place, exit 1", code, out.String(), err)
	}
}

// TestDoctorKeepsGroupWithoutSearchIndex shows that doctor --repair leaves
// a group without message_search where it is: the original writes such
// groups when its SQLite lacks FTS5 (_create_message_search_index), and
// both servers search them with a plain LIKE, so it is no damaged file.
func TestDoctorKeepsGroupWithoutSearchIndex(t *testing.T) {
	dir := t.TempDir()
	st := newTestStore(t, dir)
	path := groupFile(dir, newTestGroup(t, st, "team", "alice"))
	st.close()
	db := openSQLite(sqliteDSN(path, "rw"), 1)
	err := execAll(db, "DROP TRIGGER messages_search_after_insert", "DROP TRIGGER messages_search_after_delete",
		"DROP TRIGGER messages_search_after_content_update", "DROP TABLE message_search")
	if err = errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	agePastGrace(t, path)
	var out bytes.Buffer
	code := runDoctor([]string{"--repair", "--groups-dir", dir}, &out, &out)
	if _, err := os.Stat(path); err != nil || code != 0 {
		t.Errorf("doctor --repair on a group without the search index: got exit %d, %q, stat %v; want it left alone, exit 0", code, out.String(), err)
	}
}

// TestDoctorIgnoresGroupDeletedDuringCheck shows that a group file deleted
// while doctor checks it is not reported: a delete_group running beside
// doctor is no damage. Healthy groups, each under a new id, are put in
// place whole by rename and deleted again while doctor scans, so every
// failed check is such a race.
func TestDoctorIgnoresGroupDeletedDuringCheck(t *testing.T) {
	dir := t.TempDir()
	st := newTestStore(t, dir)
	id := newTestGroup(t, st, "team", "alice")
	st.close()
	healthy, err := os.ReadFile(groupFile(dir, id))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(groupFile(dir, id)); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var churn sync.WaitGroup
	churn.Add(1)
	go func() {
		defer churn.Done()
		staged := filepath.Join(dir, "staged")
		for ctx.Err() == nil {
			path := groupFile(dir, "grp_"+randomHex(16))
			if os.WriteFile(staged, healthy, 0o644) != nil || os.Rename(staged, path) != nil || os.Remove(path) != nil {
				return
			}
		}
	}()
	defer churn.Wait()
	defer stop()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		findings, _, err := doctorScan(dir, time.Now())
		if err != nil || len(findings) > 0 {
			t.Fatalf("doctor beside a group being deleted: got %v, %v; want no findings", findings, err)
		}
	}
}
