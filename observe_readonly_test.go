package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fileDigest maps each file in dir to its contents.
func fileDigest(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasSuffix(path, "-shm") {
			return nil
		}
		data, err := os.ReadFile(path)
		out[filepath.Base(path)] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBrowsingChangesNoFile(t *testing.T) {
	fx := newObserveFixture(t)
	now := time.Now()
	id := seedShowcase(fx, now)
	before := fileDigest(t, fx.dir)
	obs := newTestObserver(t, fx.dir, 50*time.Millisecond)
	srv := httptest.NewServer(obs)
	defer srv.Close()
	paths := []string{"/", "/fragments/overview", "/fragments/chats", "/fragments/chats?group_id=" + id, "/fragments/chat?group_id=" + id,
		"/fragments/messages?group_id=" + id, "/fragments/messages?group_id=" + id + "&older_than_message_id=31",
		"/fragments/message?group_id=" + id + "&message_id=5", "/fragments/overview-group-row?group_id=" + id,
		"/fragments/analytics", "/fragments/analytics?range_value=2&range_unit=d&outcome=error:validation",
		"/fragments/analytics?range_value=30&range_unit=m", "/fragments/analytics?range_value=1&range_unit=Y&tool_name=send_message",
		"/fragments/storage", "/api/health", "/static/observer.js"}
	for _, p := range paths {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s got %d", p, resp.StatusCode)
		}
	}
	for i := 0; i < 3; i++ {
		obs.pollOnce()
	}
	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			break
		}
	}
	resp.Body.Close()
	obs.dbs.closeAll()
	after := fileDigest(t, fx.dir)
	for name, data := range before {
		if !bytes.Equal(data, after[name]) {
			t.Errorf("%s changed while browsing", name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok && strings.HasSuffix(name, ".sqlite3") {
			t.Errorf("browsing created %s", name)
		}
	}
}

// TestObserveReadsStoreWrittenGroups browses groups written by the server's
// own store, so the dashboard and the writer agree on the schema.
func TestObserveReadsStoreWrittenGroups(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "groups")
	s := newTestStore(t, dir)
	meta, err := s.createGroup("writer", "Store written", "by the MCP server")
	if err != nil {
		t.Fatal(err)
	}
	id := meta.groupID
	for _, m := range []struct{ ctx, name string }{{"writer", "Writer"}, {"reader", "Reader"}} {
		if err := s.joinGroup(id, m.ctx, m.name); err != nil {
			t.Fatal(err)
		}
	}
	obs := newTestObserver(t, dir, time.Second)
	obs.pollOnce()
	sub := obs.hub.subscribe()
	defer obs.hub.unsubscribe(sub)
	sent, err := s.sendMessage(id, outgoing{contextID: "writer", name: "Writer", text: "hello @reader <b>there</b>", priority: "urgent"})
	if err != nil {
		t.Fatal(err)
	}
	obs.pollOnce()
	select {
	case ev := <-sub.ch:
		if want := fmt.Sprintf(`event: message.created`+"\n"+`data: {"group_id":%q,"message_id":%d}`, id, sent.messageID); !strings.HasPrefix(string(ev), want) {
			t.Errorf("got %q; want %q", ev, want)
		}
	default:
		t.Error("a message written by the store published no event")
	}
	checks := []struct{ path, want string }{
		{"/fragments/overview", "Store written"},
		{"/fragments/overview", "Messages</strong><span>1"},
		{"/fragments/chats?group_id=" + id, "hello @reader &lt;b&gt;there&lt;/b&gt;"},
		{"/fragments/chats?group_id=" + id, "1 unread"},
		{"/fragments/chats?group_id=" + id, "by the MCP server"},
	}
	for _, c := range checks {
		if _, body, _ := get(t, obs, c.path); !strings.Contains(body, c.want) {
			t.Errorf("%s lacks %q", c.path, c.want)
		}
	}
}

// TestObserveReadsOriginalsDatabases browses databases the Python original
// wrote: the interop group and an audit log with rollups. Latency
// percentiles read from the rollups must equal those computed from raw rows.
func TestObserveReadsOriginalsDatabases(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "groups")
	const id = "grp_cadcd261ac1a428b90ccb8b7c8633132"
	copyFile(t, filepath.Join("testdata", "interop", id+".sqlite3"), groupFile(dir, id))
	copyFile(t, filepath.Join("testdata", "audit", "original.sqlite3"), filepath.Join(dir, catalogFileName))
	obs := newTestObserver(t, dir, time.Second)

	db, err := sql.Open("sqlite", readOnlyDSN(filepath.Join(dir, catalogFileName)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var durations []int64
	rows, err := db.Query("SELECT duration_ms FROM tool_calls ORDER BY duration_ms")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var d int64
		if err := rows.Scan(&d); err != nil {
			t.Fatal(err)
		}
		durations = append(durations, d)
	}
	rows.Close()
	rank := func(p float64) int64 { return durations[int(math.Ceil(float64(len(durations))*p))-1] }
	var errs int64
	if err := db.QueryRow("SELECT COUNT(*) FROM tool_calls WHERE outcome = 'error'").Scan(&errs); err != nil {
		t.Fatal(err)
	}

	checks := []struct{ path, want string }{
		{"/fragments/overview", "Interop ✓ Café"},
		{"/fragments/overview", "Messages</strong><span>10"},
		{"/fragments/overview", fmt.Sprintf("Tool calls</strong><span>%d", len(durations))},
		{"/fragments/overview", fmt.Sprintf("%d ms p95", rank(0.95))},
		{"/fragments/overview", `<td class="num">10</td>`},
		{"/fragments/chats?group_id=" + id, "Grüße aus München — ünïcödé"},
		{"/fragments/chats?group_id=" + id, "routing: mentioned"},
		{"/fragments/chats?group_id=" + id, "7 unread"},
		{"/fragments/analytics", fmt.Sprintf("Total calls</strong><span>%d", len(durations))},
		{"/fragments/analytics", fmt.Sprintf("%d / %d ms", rank(0.5), rank(0.95))},
		{"/fragments/analytics", fmt.Sprintf("Error rate</strong><span>%s", percentText(errs, int64(len(durations))))},
		{"/fragments/storage", fmt.Sprintf("Audit rows</dt><dd>%d", len(durations))},
	}
	for _, c := range checks {
		if _, body, _ := get(t, obs, c.path); !strings.Contains(body, c.want) {
			t.Errorf("%s lacks %q", c.path, c.want)
		}
	}
}

// TestGroupIDOfFile checks that only files named by a valid group id are
// read as groups.
func TestGroupIDOfFile(t *testing.T) {
	valid := "grp_" + strings.Repeat("0a", 16)
	tests := []struct {
		name, want string
		ok         bool
	}{
		{valid + ".sqlite3", valid, true},
		{valid, "", false},
		{"grp_" + strings.Repeat("A", 32) + ".sqlite3", "", false},
		{valid + ".sqlite3-wal", "", false},
		{catalogFileName, "", false},
	}
	for _, tt := range tests {
		id, ok := groupIDOfFile(tt.name)
		if ok != tt.ok || (ok && id != tt.want) {
			t.Errorf("groupIDOfFile(%q) got %q, %v; want %q, %v", tt.name, id, ok, tt.want, tt.ok)
		}
	}
}
