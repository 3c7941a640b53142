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
	"sync"
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
	case ev := <-sub:
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

// ageGroupFiles sets the modification times of a group's database and WAL
// an hour back, so that their signature counts as settled.
func ageGroupFiles(t *testing.T, dir, id string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{groupFile(dir, id), groupFile(dir, id) + "-wal"} {
		if err := os.Chtimes(p, old, old); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}

func TestGroupSignature(t *testing.T) {
	fx := newObserveFixture(t)
	id := fx.group("Signed", "", time.Now(), fixtureMember{"ctx0", "Zero"})
	path := groupFile(fx.dir, id)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Read as if at the moment of the write, however slow this machine is.
	fresh, ok := readGroupSignature(path, info.ModTime())
	if !ok {
		t.Fatal("no signature for an existing group")
	}
	again, _ := readGroupSignature(path, time.Now())
	if again.unchangedSince(fresh) {
		t.Error("a signature of files written just now proves nothing; got unchanged")
	}
	ageGroupFiles(t, fx.dir, id)
	settled, _ := readGroupSignature(path, time.Now())
	again, _ = readGroupSignature(path, time.Now())
	if !settled.settled || !again.unchangedSince(settled) {
		t.Errorf("untouched settled files: got settled %v, unchanged %v; want both", settled.settled, again.unchangedSince(settled))
	}
	fx.messages(id, fixtureMessage{Sender: "ctx0", SenderName: "Zero", Content: "news", At: time.Now()})
	if after, _ := readGroupSignature(path, time.Now()); after.unchangedSince(settled) {
		t.Error("a commit did not change the signature")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, ok := readGroupSignature(path, time.Now()); ok {
		t.Error("a deleted group still has a signature")
	}
}

// TestOverviewSkipsIdleGroups checks that Overview reads a group whose
// files have not changed from its cache, without opening the database, and
// reads it again once it changes.
func TestOverviewSkipsIdleGroups(t *testing.T) {
	fx := newObserveFixture(t)
	ids := []string{
		fx.group("Quiet", "", time.Now().Add(-time.Hour), fixtureMember{"ctx0", "Zero"}),
		fx.group("Busy", "", time.Now().Add(-time.Hour), fixtureMember{"ctx0", "Zero"}),
	}
	for _, id := range ids {
		fx.messages(id, fixtureMessage{Sender: "ctx0", SenderName: "Zero", Content: "first", At: time.Now().Add(-time.Hour)})
		ageGroupFiles(t, fx.dir, id)
	}
	obs := newTestObserver(t, fx.dir, time.Hour)
	if _, body, _ := get(t, obs, "/fragments/overview"); !strings.Contains(body, "Messages</strong><span>2") {
		t.Fatalf("first render lacks the two messages")
	}
	obs.dbs.closeAll()
	if _, body, _ := get(t, obs, "/fragments/overview"); !strings.Contains(body, "Messages</strong><span>2") {
		t.Fatalf("cached render lacks the two messages")
	}
	for path := range obs.dbs.entries {
		if _, isGroup := groupIDOfFile(filepath.Base(path)); isGroup {
			t.Errorf("a render of unchanged groups opened %s", filepath.Base(path))
		}
	}
	fx.messages(ids[1], fixtureMessage{Sender: "ctx0", SenderName: "Zero", Content: "second", At: time.Now()})
	_, body, _ := get(t, obs, "/fragments/overview")
	if !strings.Contains(body, "Messages</strong><span>3") || !strings.Contains(body, "second") {
		t.Errorf("render after a write does not show it")
	}
	if _, open := obs.dbs.entries[groupFile(fx.dir, ids[0])]; open {
		t.Error("the unchanged group was opened again")
	}
}

func TestReadOnlyPoolBound(t *testing.T) {
	fx := newObserveFixture(t)
	pool := &readOnlyPool{entries: map[string]*readOnlyEntry{}}
	defer pool.closeAll()
	var first string
	for i := range maxReadOnlyHandles + 5 {
		id := fx.group("G", "", time.Now(), fixtureMember{"ctx0", "Zero"})
		if i == 0 {
			first = id
		}
		if _, err := pool.groupState(fx.dir, id); err != nil {
			t.Fatal(err)
		}
		if n := len(pool.entries); n > maxReadOnlyHandles {
			t.Fatalf("pool holds %d handles; want at most %d", n, maxReadOnlyHandles)
		}
	}
	if _, open := pool.entries[groupFile(fx.dir, first)]; open {
		t.Error("the least recently used handle was kept")
	}
	// A handle retired while a request holds it keeps answering.
	held, err := pool.group(fx.dir, first)
	if err != nil {
		t.Fatal(err)
	}
	// Every connection of a handle has the bounded page cache.
	if got := queryRows(t, held, "PRAGMA cache_size"); len(got) != 1 || got[0] != "-512" {
		t.Errorf("cache_size of a pool handle: got %v; want [-512]", got)
	}
	for range maxReadOnlyHandles {
		id := fx.group("H", "", time.Now(), fixtureMember{"ctx0", "Zero"})
		if _, err := pool.group(fx.dir, id); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := held.QueryRow("SELECT COUNT(*) FROM group_members").Scan(&n); err != nil || n != 1 {
		t.Errorf("retired handle: got %d members (%v); want 1", n, err)
	}
	if _, err := os.Stat(filepath.Join(fx.dir, first+".sqlite3")); err != nil {
		t.Fatal(err)
	}
	// So does one whose file was replaced, which was closed under the
	// request: its next connection opens the path, so it reads the new file.
	held, err = pool.group(fx.dir, first)
	if err != nil {
		t.Fatal(err)
	}
	other := fx.group("R", "", time.Now(), fixtureMember{"ctx0", "Zero"}, fixtureMember{"ctx1", "One"})
	if err := os.Rename(groupFile(fx.dir, other), groupFile(fx.dir, first)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.group(fx.dir, first); err != nil {
		t.Fatal(err)
	}
	if err := held.QueryRow("SELECT COUNT(*) FROM group_members").Scan(&n); err != nil || n != 2 {
		t.Errorf("handle of a replaced file: got %d members (%v); want 2", n, err)
	}
}

// TestGroupCacheConcurrentReads reads one settled group through the cache
// from several goroutines at once, as Overview renders and starting event
// streams do, when its cache entry already holds another kind of read: every
// goroutine then finds the entry, and the first to miss stores into it.
// go test -race reports a field of the entry read without the lock its
// writer holds.
func TestGroupCacheConcurrentReads(t *testing.T) {
	fx := newObserveFixture(t)
	id := fx.group("Shared", "", time.Now().Add(-time.Hour), fixtureMember{"ctx0", "Zero"})
	fx.messages(id, fixtureMessage{Sender: "ctx0", SenderName: "Zero", Content: "first", At: time.Now().Add(-time.Hour)})
	ageGroupFiles(t, fx.dir, id)
	obs := newTestObserver(t, fx.dir, time.Hour)
	summary := func() error {
		if g, err := cachedRead(obs, id, "summary", func() (groupSummary, error) { return obs.readGroupSummary(t.Context(), id) }); err != nil || g.ID != id {
			return fmt.Errorf("cached summary: got %q, %v; want %q", g.ID, err, id)
		}
		return nil
	}
	state := func() error {
		if s, err := cachedRead(obs, id, "snapshot", func() (snapshotState, error) { return obs.dbs.groupState(obs.dir, id) }); err != nil || s.latest == nil || *s.latest != 1 {
			return fmt.Errorf("cached snapshot state: got latest %v, %v; want 1", s.latest, err)
		}
		return nil
	}
	for _, tc := range []struct {
		name          string
		cached, raced func() error
	}{
		{"summary after state", state, summary},
		{"state after summary", summary, state},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 20 {
				obs.reads.forget(id)
				if err := tc.cached(); err != nil {
					t.Fatal(err)
				}
				start := make(chan struct{})
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						<-start
						if err := tc.raced(); err != nil {
							t.Error(err)
						}
					})
				}
				close(start)
				wg.Wait()
			}
		})
	}
}

// TestReadOnlyPoolKeepsOneHandlePerFile reads more groups than the pool
// keeps open, round after round, as the poller and Overview do while more
// than maxReadOnlyHandles groups are active: an evicted handle must be taken
// back, not opened anew. Each handle holds a goroutine and lingers for
// retiredHandleGrace, so at 48 busy groups the dashboard had gained 8,700
// goroutines and 36 MB in 15 seconds.
func TestReadOnlyPoolKeepsOneHandlePerFile(t *testing.T) {
	fx := newObserveFixture(t)
	pool := &readOnlyPool{entries: map[string]*readOnlyEntry{}}
	defer pool.closeAll()
	var ids []string
	for range maxReadOnlyHandles + 16 {
		ids = append(ids, fx.group("G", "", time.Now(), fixtureMember{"ctx0", "Zero"}))
	}
	for range 5 {
		for _, id := range ids {
			if _, err := pool.groupState(fx.dir, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := len(pool.entries) + len(pool.retired); n > len(ids) {
		t.Fatalf("the pool holds %d handles (%d retired) for %d files; want at most one a file", n, len(pool.retired), len(ids))
	}
}
