//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestReadOnlyFileRecovery makes a group file mode 0444 while no process has
// it open, lets a server use it, then makes it writable again: the next
// send succeeds, in that server and in a new one, as README's failure table
// promises. SQLite gives the -wal and -shm files it creates the database's
// mode, and a read-only -shm keeps every connection read-only.
func TestReadOnlyFileRecovery(t *testing.T) {
	if os.Geteuid() == 0 {
		runAsNobody(t) // root ignores file modes
		return
	}
	dir := t.TempDir()
	first := newTestStore(t, dir)
	g := newTestGroup(t, first, "team", "alice")
	first.close() // the last connection removes the -wal and -shm files
	send := func(st *store, text string) error {
		_, err := st.sendMessage(g, outgoing{contextID: "alice", name: "alice", text: text, priority: "normal"})
		return err
	}
	path := groupFile(dir, g)
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	st := newTestStore(t, dir)
	if err := send(st, "while read-only"); !isReadOnly(err) {
		t.Fatalf("send to a mode-0444 group file: got %v; want a read-only error", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := send(st, "after chmod"); err != nil {
		t.Errorf("send once the file is writable again: got %v; want success", err)
	}
	st.close()
	if err := send(newTestStore(t, dir), "in a new server"); err != nil {
		t.Errorf("send from a new server: got %v; want success", err)
	}

	// The catalog, written after each create_group, recovers alike.
	catalog := filepath.Join(dir, catalogFileName)
	if err := os.Chmod(catalog, 0o444); err != nil {
		t.Fatal(err)
	}
	captureLog(t) // the catalog row that cannot be written is only logged
	st = newTestStore(t, dir)
	if _, err := st.createGroup("alice", "while the catalog is read-only", ""); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(catalog, 0o644); err != nil {
		t.Fatal(err)
	}
	created, err := st.createGroup("alice", "after chmod", "")
	if err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, openTestDB(t, catalog, "ro"), "SELECT COUNT(*) FROM groups WHERE group_id = ?", created.groupID); n != 1 {
		t.Errorf("catalog rows of the group created once the catalog is writable again: got %d; want 1", n)
	}

	// The audit log, in the same file, recovers alike in a server that opens
	// no catalog, after a reader (the dashboard, say) opened the file during
	// the spell and so made its -wal read-only.
	dir = t.TempDir()
	catalog = filepath.Join(dir, catalogFileName)
	call := auditTestCall("send_message", `{"caller_name":"ops"}`, `1`, `{"message_id":1}`, false, "")
	audited := func() int64 {
		a := openAuditLog(dir, auditInf, io.Discard, time.Now)
		a.observe(call)
		a.close()
		db := openTestDB(t, catalog, "ro")
		defer db.Close()
		return queryInt(t, db, "SELECT COUNT(*) FROM tool_calls")
	}
	audited()
	if err := os.Chmod(catalog, 0o444); err != nil {
		t.Fatal(err)
	}
	if n := audited(); n != 1 {
		t.Fatalf("audit rows after a call while the file is read-only: got %d; want 1", n)
	}
	if err := os.Chmod(catalog, 0o644); err != nil {
		t.Fatal(err)
	}
	if n := audited(); n != 2 {
		t.Errorf("audit rows after a call once the file is writable again: got %d; want 2", n)
	}
}

// TestUnreadableGroupIsNotDamaged: a group file this user cannot open may be
// another user's healthy group, which doctor --repair leaves in place, but
// the Overview called it a damaged file and told the user to run it.
func TestUnreadableGroupIsNotDamaged(t *testing.T) {
	if os.Geteuid() == 0 {
		runAsNobody(t) // root opens every file
		return
	}
	fx := newObserveFixture(t)
	path := groupFile(fx.dir, fx.group("Theirs", "", time.Now(), fixtureMember{"a", "A"}))
	if err := os.Chmod(path, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(path, 0o644)
	obs := newTestObserver(t, fx.dir, time.Second)
	_, body, _ := get(t, obs, "/fragments/overview")
	if strings.Contains(body, "Damaged") || !strings.Contains(body, ">Unavailable</span>") {
		t.Errorf("got an overview calling the file damaged or not unavailable: %q; want it unavailable", body)
	}
}

// TestObserveReadOnlyDirectoryIsNoDamage: SQLite reads a WAL database only
// with its -wal and -shm files, which a dashboard that cannot write the
// groups directory cannot create for an idle group. Such a group is
// unavailable, not a damaged file for doctor --repair to move aside.
func TestObserveReadOnlyDirectoryIsNoDamage(t *testing.T) {
	if os.Geteuid() == 0 {
		runAsNobody(t) // root ignores file modes
		return
	}
	fx := newObserveFixture(t)
	fx.group("Idle", "", time.Now(), fixtureMember{"ann", "Ann"}) // its writers closed: no sidecars
	if err := os.Chmod(fx.dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(fx.dir, 0o755) })
	_, body, _ := get(t, newTestObserver(t, fx.dir, time.Second), "/fragments/overview")
	if strings.Contains(body, "Damaged") || strings.Contains(body, "doctor") || !strings.Contains(body, "Unavailable") {
		t.Errorf("an intact group in a directory the dashboard cannot write: want it unavailable, not damaged: %s",
			body[strings.Index(body, "<tbody>"):])
	}
}

// runAsNobody runs the calling test again, in a child process of a copy of
// the test binary, as user nobody, and fails with its output if it fails.
func runAsNobody(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("runs as user nobody on Linux only")
	}
	tmp, err := os.MkdirTemp("", "crosstalk-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	bin := filepath.Join(tmp, "test")
	data, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(bin, data, 0o755)
	}
	if err == nil {
		err = os.Chmod(tmp, 0o777) // the child's TMPDIR
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Dir, cmd.Env = tmp, append(os.Environ(), "TMPDIR="+tmp, "HOME="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Skipf("cannot run the test binary as user nobody (a noexec temporary directory?): %v", err)
	}
	if err != nil {
		t.Fatalf("as user nobody: %v\n%s", err, out)
	}
}

// TestListGroupsSkipsNonRegularFiles: a FIFO or directory named like a group
// file is no group. Opening a FIFO blocks until a writer opens it, so
// list_groups, asking SQLite whether such a file is damaged, hung for good.
func TestListGroupsSkipsNonRegularFiles(t *testing.T) {
	for _, tc := range []struct {
		kind string
		make func(path string) error
	}{
		{"fifo", func(path string) error { return syscall.Mkfifo(path, 0o644) }},
		{"directory", func(path string) error { return os.Mkdir(path, 0o755) }},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			logs := captureLog(t)
			dir := t.TempDir()
			st := newTestStore(t, dir)
			good := newTestGroup(t, st, "team", "alice")
			if err := tc.make(groupFile(dir, "grp_"+randomHex(16))); err != nil {
				t.Fatal(err)
			}
			done := make(chan []groupMeta, 1)
			go func() {
				groups, err := st.listGroups()
				if err != nil {
					t.Errorf("listGroups: %v", err)
				}
				done <- groups
			}()
			select {
			case groups := <-done:
				if len(groups) != 1 || groups[0].groupID != good {
					t.Errorf("listGroups: got %v; want only %s", groups, good)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("listGroups with a %s named like a group: still running after 20 s", tc.kind)
			}
			if strings.Contains(logs.String(), "damaged") {
				t.Errorf("log: got %q; want no damaged-file warning doctor could not act on", logs.String())
			}
		})
	}
}

// TestDoctorReadOnlyDirectoryIsNoDamage: SQLite reads an idle WAL group only
// with -wal and -shm files, which a user who cannot write the groups
// directory cannot create. doctor run by such a user reported every healthy
// group as damaged, and exited 1, where the dashboard calls it unavailable.
func TestDoctorReadOnlyDirectoryIsNoDamage(t *testing.T) {
	if os.Geteuid() == 0 {
		runAsNobody(t) // root ignores file modes
		return
	}
	dir := t.TempDir()
	st := newTestStore(t, dir)
	newTestGroup(t, st, "team", "alice")
	st.close() // no sidecars left
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	var out bytes.Buffer
	if code := runDoctor([]string{"--groups-dir", dir}, &out, &out); code != 0 || strings.Contains(out.String(), "damaged") {
		t.Errorf("doctor on a healthy group in a directory it cannot write: got exit %d, %q; want exit 0, nothing damaged", code, out.String())
	}
}

// TestDoctorRepairKeepsFilesInTheDirectory: doctor --repair moves a damaged
// file into damaged/ only when that is a real directory inside the groups
// directory. Through a damaged/ that is a symlink it moved the file, which
// may be another user's group, out of the directory to wherever that points.
func TestDoctorRepairKeepsFilesInTheDirectory(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	bad := makeTablelessGroup(t, dir)
	old := time.Now().Add(-2 * doctorGracePeriod)
	if err := errors.Join(os.Chtimes(groupFile(dir, bad), old, old), os.Symlink(outside, filepath.Join(dir, damagedDirName))); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	code := runDoctor([]string{"--repair", "--groups-dir", dir}, &out, &out)
	if moved, _ := filepath.Glob(filepath.Join(outside, "*")); len(moved) > 0 || code != 1 {
		t.Errorf("doctor --repair with damaged/ a symlink: got exit %d, %q, files moved out %v; want exit 1, none moved", code, out.String(), moved)
	}
}

// TestSendsBehindStoppedWriter fires 20 sends, each with its own context,
// at a group whose write lock another process holds while stopped, and
// cancels half of them: a cancelled send is never stored, and every send is
// answered within its own busy window, however many wait beside it.
func TestSendsBehindStoppedWriter(t *testing.T) {
	for _, tc := range []struct {
		name     string
		resumeAt time.Duration // when the writer resumes; 0 after every answer
	}{
		{"resumed within the window", 2 * time.Second},
		{"stopped past the window", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newTestStore(t, t.TempDir())
			g := newTestGroup(t, st, "stopped", "alice", "bob")
			resume := stoppedWriter(t, st, g)
			if tc.resumeAt > 0 {
				time.AfterFunc(tc.resumeAt, resume)
			}
			const sends = 20
			errs, took := make([]error, sends), make([]time.Duration, sends)
			var wg sync.WaitGroup
			for i := range sends {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if i%2 == 1 {
					time.AfterFunc(time.Second, cancel)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Duration(i) * 25 * time.Millisecond)
					start := time.Now()
					_, _, errs[i] = st.sendMessages(ctx, g, []outgoing{{contextID: "alice", name: "alice", text: fmt.Sprintf("send %d", i), priority: "normal"}})
					took[i] = time.Since(start)
				}()
			}
			wg.Wait()
			resume()
			db := openTestDB(t, st.groupPath(g), "ro")
			for i := range sends {
				stored := queryInt(t, db, "SELECT COUNT(*) FROM messages WHERE content = ?", fmt.Sprintf("send %d", i))
				switch {
				case took[i] > 6*time.Second:
					t.Errorf("send %d answered %v after it started; want within its busy window of %v", i, took[i], busyRetryWindow)
				case i%2 == 1 && (stored != 0 || !errors.Is(errs[i], context.Canceled)):
					t.Errorf("cancelled send %d: got %d stored, error %v; want none stored, context.Canceled", i, stored, errs[i])
				case i%2 == 0 && tc.resumeAt > 0 && (stored != 1 || errs[i] != nil):
					t.Errorf("send %d: got %d stored, error %v; want it stored once the writer resumed", i, stored, errs[i])
				case i%2 == 0 && tc.resumeAt == 0 && (stored != 0 || !isBusy(errs[i]) || took[i] < busyRetryWindow-100*time.Millisecond):
					t.Errorf("send %d: got %d stored, error %v after %v; want busy after its window", i, stored, errs[i], took[i])
				}
			}
			t.Logf("answer times: %v", took)
		})
	}
}

// stoppedWriter starts sqlite3(1) holding an IMMEDIATE transaction on group
// g's database, stops it with SIGSTOP, and returns the function that resumes
// it and ends its transaction.
func stoppedWriter(t *testing.T, st *store, g string) (resume func()) {
	t.Helper()
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("no sqlite3(1) to hold the group from another process")
	}
	holder := exec.Command("sqlite3", st.groupPath(g))
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "BEGIN IMMEDIATE;\nSELECT 'held';\n")
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("sqlite3 holding the group: got %q, %v; want held", line, err)
	}
	if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			holder.Process.Signal(syscall.SIGCONT)
			stdin.Close() // sqlite3 rolls back and exits
			holder.Wait()
		})
	}
	t.Cleanup(resume)
	return resume
}
