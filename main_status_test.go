package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStatusEventsCountsSentMessages: --events N shows the receipts of the
// member's newest N sent messages, as its help says, however many N is;
// status showed at most 20, the receipts resource's bound.
func TestStatusEventsCountsSentMessages(t *testing.T) {
	st := newTestStore(t, t.TempDir())
	g := newTestGroup(t, st, "team", "alice", "bob")
	for i := 1; i <= 30; i++ {
		if _, err := st.sendMessage(g, outgoing{contextID: "alice", name: "alice", text: fmt.Sprint("hi ", i), priority: "normal"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ events, first, last int }{{5, 26, 30}, {25, 6, 30}, {40, 1, 30}} {
		t.Run(fmt.Sprint(tc.events), func(t *testing.T) {
			text, err := memberStatus(st, statusOptions{contextID: "alice", events: tc.events})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, line := range strings.Split(text, "\n") {
				if _, rest, ok := strings.Cut(line, "sent message "); ok {
					id, _, _ := strings.Cut(rest, ":")
					got = append(got, id)
				}
			}
			want := tc.last - tc.first + 1
			if len(got) != want || got[0] != fmt.Sprint(tc.first) || got[len(got)-1] != fmt.Sprint(tc.last) {
				t.Errorf("got sent messages %v; want %d, %d to %d, oldest first", got, want, tc.first, tc.last)
			}
		})
	}
}

// TestDoctorRepairOverwritesNothing: doctor --repair moves a damaged file
// into damaged/ under a name none of whose files is there yet. Where only a
// sidecar of an earlier move was left (its main file taken back out to
// retry, say) it chose that name and replaced the sidecar with this file's.
func TestDoctorRepairOverwritesNothing(t *testing.T) {
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		t.Run(suffix, func(t *testing.T) {
			dir := t.TempDir()
			name := makeTablelessGroup(t, dir) + ".sqlite3"
			earlier := filepath.Join(dir, damagedDirName, name+suffix)
			old := time.Now().Add(-2 * doctorGracePeriod)
			if err := errors.Join(os.Mkdir(filepath.Dir(earlier), 0o755), os.WriteFile(earlier, []byte("earlier"), 0o644),
				os.Chtimes(filepath.Join(dir, name), old, old)); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			code := runDoctor([]string{"--repair", "--groups-dir", dir}, &out, &out)
			if got, _ := os.ReadFile(earlier); code != 0 || string(got) != "earlier" {
				t.Errorf("doctor --repair: got exit %d, %q, the earlier %s holding %.20q; want exit 0, it kept", code, out.String(), suffix, got)
			}
		})
	}
}

// TestStatusRefusesAnUnreadableGroupsDir runs status on a groups directory
// this user may enter but not list, as another user's: it must fail, not
// report the member in no group with nothing unread.
func TestStatusRefusesAnUnreadableGroupsDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "groups")
	if err := os.Mkdir(dir, 0o311); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) }) // before TempDir's removal, which lists it
	if _, err := os.ReadDir(dir); err == nil {
		t.Skip("this user lists any directory (root)")
	}
	code, stdout, stderr := runCLI("status", "--context-id", "alice", "--groups-dir", dir)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "permission denied") {
		t.Errorf("got exit %d, stdout %q, stderr %q; want exit 1 and the error on stderr", code, stdout, stderr)
	}
}
