package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestResourceURIs(t *testing.T) {
	g := "grp_" + strings.Repeat("0a", 16)
	for _, ctx := range []string{"plain", "with/slash", "sp ace", "ü@:?#&=+%", "a.b_c-d~e"} {
		uri := wakeupURI(g, ctx)
		gotG, gotC, err := parseWakeupURI(uri)
		if err != nil || gotG != g || gotC != ctx {
			t.Errorf("round trip %q via %s: got %q %q %v", ctx, uri, gotG, gotC, err)
		}
	}
	if got := wakeupURI(g, "C/x y"); got != "crosstalk://groups/"+g+"/wakeups/C%2Fx%20y" {
		t.Errorf("got %s; want Python's quote(safe='') encoding", got)
	}
	for _, tt := range []struct{ uri, wantErr string }{
		{"crosstalk://groups/" + g + "/messages", ""},
		{"crosstalk://groups/" + g + "/other", "Invalid Crosstalk subscription URI."},
		{"crosstalk://groups/../" + g[3:] + "/messages", "Invalid group_id."},
		// Prefix and suffix share the slash: the original's uri[19:-9] is "", an invalid group id.
		{"crosstalk://groups/messages", "Invalid group_id."},
	} {
		_, err := parseGroupURI(tt.uri)
		if got := fmt.Sprint(err); (tt.wantErr == "" && err != nil) || (tt.wantErr != "" && got != tt.wantErr) {
			t.Errorf("parseGroupURI(%s): got %v; want %q", tt.uri, err, tt.wantErr)
		}
	}
	if _, _, err := parseWakeupURI("crosstalk://groups/" + g + "/wakeups/%zz"); err != nil {
		t.Errorf("malformed escapes are kept like Python's unquote: %v", err)
	}
}

// lineRecorder collects what an inflight table writes, as JSON lines.
type lineRecorder struct {
	mu    sync.Mutex
	lines []string
	added chan struct{}
}

func newLineRecorder() *lineRecorder { return &lineRecorder{added: make(chan struct{}, 100)} }

func (r *lineRecorder) write(v any) error {
	r.mu.Lock()
	r.lines = append(r.lines, pyJSON(v))
	r.mu.Unlock()
	r.added <- struct{}{}
	return nil
}

func (r *lineRecorder) writeFor(_ json.RawMessage, v any, _ bool) error {
	if v == nil { // a cancel: no message
		return nil
	}
	return r.write(v)
}

func (r *lineRecorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// waitLines waits, up to a generous bound for slow CI machines, until n
// lines were written.
func (r *lineRecorder) waitLines(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for len(r.snapshot()) < n {
		select {
		case <-r.added:
		case <-deadline:
			t.Fatalf("got lines %q; want %d", r.snapshot(), n)
		}
	}
	return r.snapshot()
}

func TestInflightAnswersOutOfOrder(t *testing.T) {
	rec := newLineRecorder()
	table := newInflight(context.Background(), rec)
	release := make(chan struct{})
	if err := table.start(json.RawMessage(`1`), nil, func(r *inflightRequest) (any, *rpcError) {
		<-release
		return object{{"n", 1}}, nil
	}); err != nil {
		t.Fatalf("start 1: %v", err)
	}
	if err := table.start(json.RawMessage(`"two"`), nil, func(r *inflightRequest) (any, *rpcError) {
		return object{{"n", 2}}, nil
	}); err != nil {
		t.Fatalf("start two: %v", err)
	}
	got := rec.waitLines(t, 1)
	if want := `{"jsonrpc": "2.0", "id": "two", "result": {"n": 2}}`; got[0] != want {
		t.Errorf("first answer %s; want %s", got[0], want)
	}
	if err := table.start(json.RawMessage(`1`), nil, func(*inflightRequest) (any, *rpcError) { return object{}, nil }); err != errDuplicateID {
		t.Errorf("starting a running id again: got %v; want errDuplicateID", err)
	}
	close(release)
	got = rec.waitLines(t, 2)
	if want := `{"jsonrpc": "2.0", "id": 1, "result": {"n": 1}}`; got[1] != want {
		t.Errorf("second answer %s; want %s", got[1], want)
	}
	table.close()
	if n := table.running(); n != 0 {
		t.Errorf("running after close: got %d; want 0", n)
	}
}

func TestInflightCancelSilencesRequest(t *testing.T) {
	rec := newLineRecorder()
	table := newInflight(context.Background(), rec)
	started := make(chan *inflightRequest)
	if err := table.start(json.RawMessage(`7`), json.RawMessage(`"tok"`), func(r *inflightRequest) (any, *rpcError) {
		started <- r
		<-r.ctx.Done()
		if err := r.notify("notifications/resources/updated", object{{"uri", "x"}}); err != nil {
			t.Errorf("notify after cancel: %v", err)
		}
		return object{}, nil
	}); err != nil {
		t.Fatalf("start: %v", err)
	}
	r := <-started
	if err := r.progress(1, 2, "half"); err != nil {
		t.Fatalf("progress: %v", err)
	}
	got := rec.waitLines(t, 1)
	if want := `{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "tok", "progress": 1, "total": 2, "message": "half"}}`; got[0] != want {
		t.Errorf("progress %s; want %s", got[0], want)
	}
	if !table.cancel(json.RawMessage(`7`)) {
		t.Fatalf("cancel of a running request reported it unknown")
	}
	table.close()
	if got := rec.snapshot(); len(got) != 1 {
		t.Errorf("lines after cancel: got %q; want only the progress line", got)
	}
	if table.cancel(json.RawMessage(`7`)) {
		t.Errorf("cancel of a finished request reported it running")
	}
}

func TestInflightCloseStillAnswers(t *testing.T) {
	rec := newLineRecorder()
	table := newInflight(context.Background(), rec)
	if err := table.start(json.RawMessage(`3`), nil, func(r *inflightRequest) (any, *rpcError) {
		if err := r.progress(1, 0, ""); err != nil {
			t.Errorf("progress without a token: %v", err)
		}
		<-r.ctx.Done()
		return nil, &rpcError{-32603, "closing"}
	}); err != nil {
		t.Fatalf("start: %v", err)
	}
	table.close()
	got := rec.snapshot()
	if want := `{"jsonrpc": "2.0", "id": 3, "error": {"code": -32603, "message": "closing"}}`; len(got) != 1 || got[0] != want {
		t.Errorf("lines: got %q; want [%s]", got, want)
	}
}

// running reports how many requests are in flight. Only tests need it.
func (t *inflight) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.reqs)
}

// TestListenRetriesABusyGroup opens a listen on a group URI and a wakeup
// URI while another process holds the group's database: both checks wait
// for it, and the acknowledgement lists both.
func TestListenRetriesABusyGroup(t *testing.T) {
	dir := t.TempDir()
	st := newTestStore(t, dir)
	gid := newTestGroup(t, st, "g", "a", "b")
	rec := newLineRecorder()
	s := newServerWriting(context.Background(), st, rec, newServerConfig(version, time.Hour))
	t.Cleanup(func() { s.inflight.close(); s.subs.close() })
	st.forget(gid)
	db := openTestDB(t, groupFile(dir, gid), "rw")
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"PRAGMA locking_mode=EXCLUSIVE", "BEGIN EXCLUSIVE", "UPDATE group_state SET message_revision = message_revision"} {
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatal(q, err)
		}
	}
	time.AfterFunc(300*time.Millisecond, func() {
		conn.ExecContext(context.Background(), "COMMIT")
		conn.ExecContext(context.Background(), "PRAGMA locking_mode=NORMAL")
		conn.ExecContext(context.Background(), "SELECT 1 FROM group_state") // gives up the exclusive lock
		conn.Close()
		db.Close()
	})
	uris := []string{groupURI(gid), wakeupURI(gid, "a")}
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": map[string]any{
		"notifications": map[string]any{"resourceSubscriptions": uris},
		"_meta":         map[string]any{metaProtocolVersion: revModern, metaClientCapabilities: map[string]any{}}}})
	if got := exchangeLine(t, s, string(req)); got != "" {
		t.Fatalf("listen answered at once: %s", got)
	}
	ack := rec.waitLines(t, 1)[0]
	for _, uri := range uris {
		if !strings.Contains(ack, uri) {
			t.Errorf("acknowledgement %s; want %s in it (the group was only busy)", ack, uri)
		}
	}
}
