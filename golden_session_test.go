package main

// This file is the golden replay's conversation with the server under test
// (started by startGoldenSession in golden_test.go): writing a line and
// reading its answers up to a sync ping, waiting for notifications, the
// exit step, and the steps in which a foreign writer changes a group's
// files behind the server's back.

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// goldenPollInterval is the subscription poll interval a transcript asks
// for; quiet transcripts set an hour so that no notification is due.
func goldenPollInterval(value string) time.Duration {
	v, err := strconv.ParseFloat(value, 64)
	if err != nil || v <= 0 {
		return 500 * time.Millisecond
	}
	return time.Duration(v * float64(time.Second))
}

// write sends one line, bounded in time in case the server stopped reading.
func (s *goldenSession) write(line string) error {
	done := make(chan error, 1)
	go func() {
		_, err := io.WriteString(s.stdin, line+"\n")
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(goldenReplyTimeout):
		return fmt.Errorf("server did not read the line within %v", goldenReplyTimeout)
	}
}

// decodeGolden decodes JSON keeping numbers exact.
func decodeGolden(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

// isNotification reports whether an output value is a server notification.
func isNotification(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	_, hasMethod := m["method"]
	_, hasID := m["id"]
	return hasMethod && !hasID
}

// exchange sends line and returns every response written before the answer
// to a following sync ping; notifications go to pending.
func (s *goldenSession) exchange(line string) ([]any, []string, error) {
	s.syncs++
	syncID := fmt.Sprintf("__sync__%d", s.syncs)
	if err := s.write(line); err != nil {
		return nil, nil, err
	}
	if err := s.write(`{"jsonrpc":"2.0","id":"` + syncID + `","method":"ping"}`); err != nil {
		return nil, nil, err
	}
	var responses []any
	var raw []string
	deadline := time.After(goldenReplyTimeout)
	for {
		select {
		case b, ok := <-s.lines:
			if !ok {
				return responses, raw, fmt.Errorf("server closed stdout; stderr: %s", s.stderr.String())
			}
			b = withoutWaitTool(b)
			v, err := decodeGolden(b)
			if err != nil {
				return responses, raw, fmt.Errorf("output line is not JSON: %q: %v", b, err)
			}
			if m, ok := v.(map[string]any); ok && m["id"] == syncID {
				if !reflect.DeepEqual(m, map[string]any{"jsonrpc": "2.0", "id": syncID, "result": map[string]any{}}) {
					return responses, raw, fmt.Errorf("sync ping answer: got %s; want an empty result", b)
				}
				return responses, raw, nil
			}
			if isNotification(v) {
				s.pending = append(s.pending, v)
				continue
			}
			responses = append(responses, v)
			raw = append(raw, strings.TrimRight(string(b), "\n"))
		case <-deadline:
			return responses, raw, fmt.Errorf("no answer to the sync ping within %v", goldenReplyTimeout)
		}
	}
}

// replayAwait waits until every expected notification arrived, then a little
// longer to catch extra ones, and compares them as a set.
func (s *goldenSession) replayAwait(label string, raw json.RawMessage) {
	t := s.t
	v, err := decodeGolden(raw)
	if err != nil {
		t.Fatalf("%s: transcript await: %v", label, err)
	}
	want := map[string]bool{}
	for _, n := range v.([]any) {
		want[goldenJSON(n)] = true
	}
	got := map[string]bool{}
	var received []any
	collect := func() {
		for _, n := range s.pending {
			got[goldenJSON(s.normalize(n))] = true
		}
		received = append(received, s.pending...)
		s.pending = nil
	}
	complete := func() bool {
		for k := range want {
			if !got[k] {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(goldenNotifyTimeout)
	for collect(); !complete() && time.Now().Before(deadline); collect() {
		if !s.readNotifications(label, 50*time.Millisecond) {
			return
		}
	}
	// Extra notifications would come within a few poll intervals.
	s.readNotifications(label, 3*s.poll+300*time.Millisecond)
	collect()
	s.awaitWakeupsRecorded(label, received)
	var missing, extra []string
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("%s: notifications differ\n  missing: %s\n  extra:   %s", label, strings.Join(missing, "\n           "), strings.Join(extra, "\n           "))
	}
}

// awaitWakeupsRecorded waits until the server has recorded as notified
// every wake event it sent a notification for in notes. The poller writes
// last_notified_at after the notification, so a later step that reads it
// (a wakeup resource's last_notified_at, or a foreign writer's UPDATE that
// the server's late write would undo) would otherwise depend on how soon
// the poller ran on a loaded machine. It waits at most goldenNotifyTimeout;
// a wake event still due then is left for the next steps to report.
func (s *goldenSession) awaitWakeupsRecorded(label string, notes []any) {
	deadline := time.Now().Add(goldenNotifyTimeout)
	for _, n := range notes {
		params, _ := n.(map[string]any)["params"].(map[string]any)
		uri, _ := params["uri"].(string)
		if params["relevance"] == "deleted" || !isWakeupURI(uri) {
			continue
		}
		groupID, contextID, err := parseWakeupURI(uri)
		if err != nil {
			s.t.Fatalf("%s: notification for %s: %v", label, uri, err)
		}
		path := filepath.Join(s.dir, groupID+".sqlite3")
		if _, err := os.Stat(path); err != nil {
			continue
		}
		db, err := sql.Open("sqlite", readOnlyDSN(path))
		if err != nil {
			s.t.Fatalf("%s: open %s: %v", label, path, err)
		}
		for {
			var due int
			// The poller's own test for a due event (store.dueWakeup).
			err := db.QueryRow("SELECT COUNT(*) FROM wakeup_events WHERE context_id = ? AND acknowledged_at IS NULL "+
				"AND (last_notified_at IS NULL OR last_notified_at <= ?)",
				contextID, formatTimestamp(time.Now().Add(-wakeupReminderInterval))).Scan(&due)
			if (err == nil && due == 0) || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		db.Close()
	}
}

// readNotifications reads output for d; a response here is an error.
func (s *goldenSession) readNotifications(label string, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case b, ok := <-s.lines:
			if !ok {
				s.t.Errorf("%s: server closed stdout while waiting for notifications", label)
				return false
			}
			v, err := decodeGolden(b)
			if err != nil || !isNotification(v) {
				s.t.Errorf("%s: got unexpected output %q while waiting for notifications", label, b)
				continue
			}
			s.pending = append(s.pending, v)
		case <-timer.C:
			return true
		}
	}
}

// finish closes stdin and checks the exit status and that nothing else was written.
func (s *goldenSession) finish(want int) {
	t := s.t
	s.stdin.Close()
	select {
	case code := <-s.exit:
		if code != want {
			t.Errorf("exit status: got %d; want %d; stderr: %s", code, want, s.stderr.String())
		}
	case <-time.After(goldenReplyTimeout):
		t.Fatalf("server did not exit within %v after stdin closed", goldenReplyTimeout)
	}
	for b := range s.lines {
		v, err := decodeGolden(b)
		if err == nil && isNotification(v) && !s.quiet {
			continue // a late reminder or deletion signal after the last barrier is harmless
		}
		t.Errorf("after stdin closed: got output %q; want none", b)
	}
	if len(s.pending) > 0 && s.quiet {
		t.Errorf("got notifications %s; want none", goldenJSON(s.pending))
	}
}

// foreignPath is the database file of a group named by placeholder.
func (s *goldenSession) foreignPath(label, placeholder string) string {
	id, err := s.substitute(placeholder)
	if err != nil {
		s.t.Fatalf("%s: %v", label, err)
	}
	return filepath.Join(s.dir, id+".sqlite3")
}

// foreignSQL plays another process writing to a group database while the
// server runs, as a second server or an older client would.
func (s *goldenSession) foreignSQL(label, group, statement string) {
	path := s.foreignPath(label, group)
	// A generous busy timeout: the server may hold the write lock briefly.
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(10000)")
	if err != nil {
		s.t.Fatalf("%s: open %s: %v", label, path, err)
	}
	defer db.Close()
	if _, err := db.Exec(statement); err != nil {
		s.t.Fatalf("%s: %s: %v", label, statement, err)
	}
}

// foreignRemove deletes a group's files behind the server's back.
func (s *goldenSession) foreignRemove(label, group string) {
	path := s.foreignPath(label, group)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !os.IsNotExist(err) {
			s.t.Fatalf("%s: remove %s: %v", label, path+suffix, err)
		}
	}
}

// goldenWaitToolEntries are wait_for_messages' tools/list entries as the
// port writes them, legacy and typed. The tool is a deliberate addition
// (testdata/golden/README.md, the deviation row "tools_list, lifecycle,
// edge_protocol, batches"): the original lists 14 tools, and the replay
// removes exactly this entry from every answer before comparing, so the
// other 14 are still checked byte for byte.
var goldenWaitToolEntries = func() []string {
	var entries []string
	for _, list := range []object{toolList, typedToolList} {
		for _, def := range list.get("tools").([]any) {
			if def.(object).get("name") == "wait_for_messages" {
				entries = append(entries, ", "+pyJSON(def))
			}
		}
	}
	return entries
}()

// withoutWaitTool removes wait_for_messages' entry from an output line.
func withoutWaitTool(line []byte) []byte {
	for _, entry := range goldenWaitToolEntries {
		line = bytes.Replace(line, []byte(entry), nil, 1)
	}
	return line
}
