package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// waitSession is a session whose in-flight answers a test reads, with a
// group where alice writes and bob waits.
type waitSession struct {
	s   *server
	rec *lineRecorder
	dir string
	gid string
}

// newWaitSession starts an initialized session on a fresh directory; the
// subscription poller's interval is also the waiting tool's safety poll.
func newWaitSession(t *testing.T, interval time.Duration) *waitSession {
	return newWaitSessionKeepalive(t, interval, defaultWaitKeepalive)
}

// newWaitSessionKeepalive is newWaitSession whose waiting calls report
// progress every keepalive.
func newWaitSessionKeepalive(t *testing.T, interval, keepalive time.Duration) *waitSession {
	t.Helper()
	dir := t.TempDir()
	rec := newLineRecorder()
	cfg := newServerConfig(version, interval)
	cfg.waitKeepalive = keepalive
	s := newServerWriting(context.Background(), newTestStore(t, dir), rec, cfg)
	t.Cleanup(func() {
		s.inflight.close()
		s.subs.close()
	})
	initializeSession(t, s)
	gid := mustCreateGroup(t, s, "ctx-a")
	mustJoin(t, s, gid, "ctx-a", "alice")
	mustJoin(t, s, gid, "ctx-b", "bob")
	return &waitSession{s: s, rec: rec, dir: dir, gid: gid}
}

// startWait sends a wait_for_messages request for bob with the given extra
// arguments and _meta, and checks that nothing is answered at once.
func (w *waitSession) startWait(t *testing.T, id int, args map[string]any, meta map[string]any) {
	t.Helper()
	full := map[string]any{"group_id": w.gid, "context_id": "ctx-b", "name": "bob", "caller_name": "test"}
	for k, v := range args {
		full[k] = v
	}
	params := map[string]any{"name": "wait_for_messages", "arguments": full}
	if meta != nil {
		params["_meta"] = meta
	}
	line, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
	if err != nil {
		t.Fatal(err)
	}
	if got := exchangeLine(t, w.s, string(line)); got != "" {
		t.Fatalf("wait_for_messages answered at once: got %s; want the answer from the in-flight table", got)
	}
}

// requestLines are the written lines that belong to request id: its answer
// and, when token is set, its progress notifications. The session's poller
// writes resource notifications through the same writer, which are skipped.
func (w *waitSession) requestLines(id int, token string) []string {
	var out []string
	for _, line := range w.rec.snapshot() {
		if strings.Contains(line, fmt.Sprintf(`"id": %d, `, id)) || token != "" && strings.Contains(line, `"progressToken": `+token+`,`) {
			out = append(out, line)
		}
	}
	return out
}

// awaitAnswer waits, up to a generous bound, for request id's answer and
// returns its lines, the answer last.
func (w *waitSession) awaitAnswer(t *testing.T, id int, token string) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		lines := w.requestLines(id, token)
		if n := len(lines); n > 0 && strings.HasPrefix(lines[n-1], fmt.Sprintf(`{"jsonrpc": "2.0", "id": %d, "result"`, id)) {
			return lines
		}
		select {
		case <-w.rec.added:
		case <-deadline:
			t.Fatalf("no answer to request %d; written: %q", id, w.rec.snapshot())
		}
	}
}

// waitAnswer decodes a written tools/call answer's text content.
func waitAnswer(t *testing.T, line string) (value map[string]any, isError bool) {
	t.Helper()
	var msg struct {
		Result struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(line), &msg); err != nil || len(msg.Result.Content) != 1 {
		t.Fatalf("answer %s: not a tool result (%v)", line, err)
	}
	if err := json.Unmarshal([]byte(msg.Result.Content[0].Text), &value); err != nil {
		t.Fatal(err)
	}
	return value, msg.Result.IsError
}

// messageTexts lists the texts of a messages result.
func messageTexts(v map[string]any) []string {
	texts := []string{}
	list, _ := v["messages"].([]any)
	for _, m := range list {
		texts = append(texts, m.(map[string]any)["message"].(string))
	}
	return texts
}

func TestWaitForMessagesReturnsPendingMail(t *testing.T) {
	w := newWaitSession(t, time.Hour)
	mustSend(t, w.s, w.gid, "ctx-a", "alice", "@bob already here", nil)
	w.startWait(t, 7, map[string]any{"timeout_seconds": 30}, nil)
	lines := w.awaitAnswer(t, 7, "")
	v, isErr := waitAnswer(t, lines[0])
	if got := messageTexts(v); isErr || len(got) != 1 || got[0] != "@bob already here" {
		t.Errorf("wait_for_messages: got %v (isError %v); want the pending message", got, isErr)
	}
	// It marked the mail read, as get_unread_messages does, and recorded
	// the delivery as made by this tool.
	if got := messageTexts(mustCall(t, w.s, "get_unread_messages", map[string]any{"group_id": w.gid, "context_id": "ctx-b", "name": "bob"})); len(got) != 0 {
		t.Errorf("unread after the wait: got %v; want none", got)
	}
	db := openGroupDB(t, w.dir, w.gid)
	ds, err := wakeupDeliveries(db, "ctx-b", 0, false)
	if err != nil || len(ds) != 1 {
		t.Fatalf("wake events of bob: got %d (%v); want 1", len(ds), err)
	}
	if d := ds[0]; d.deliveredVia != viaWaitForMessage || d.state() != "read" {
		t.Errorf("delivery: got via %q state %q; want via %q state read", d.deliveredVia, d.state(), viaWaitForMessage)
	}
}

// TestWaitForMessagesReturnsOnSend has another store on the same directory,
// as another process would, send while bob waits. With file events the
// safety poll is an hour away, so only an event can end the wait; without,
// the poll must.
func TestWaitForMessagesReturnsOnSend(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events bool
	}{{"file events", true}, {"poll only", false}} {
		t.Run(tc.name, func(t *testing.T) {
			interval := 100 * time.Millisecond
			w := newWaitSession(t, interval)
			if tc.events {
				w.s.changes = newChangeWatcher(w.dir)
				t.Cleanup(w.s.changes.close)
				if !w.s.changes.native.Load() {
					t.Skip("no file events on this platform")
				}
				w.s.subs.interval = time.Hour
			}
			other := newServer(newTestStore(t, w.dir), &strings.Builder{}, newServerConfig(version, time.Hour))
			t.Cleanup(other.subs.close)
			if tc.events && w.s.changes.watching() {
				t.Fatal("watching before the wait; want no watch")
			}
			w.startWait(t, 8, map[string]any{"timeout_seconds": 40}, nil)
			if tc.events {
				// The blocked wait is what keeps the watch running.
				waitUntil(t, "a watch while wait_for_messages blocks", w.s.changes.watching)
			}
			// A ping is answered while the wait runs.
			if got := exchangeLine(t, w.s, `{"jsonrpc":"2.0","id":9,"method":"ping"}`); got != `{"jsonrpc": "2.0", "id": 9, "result": {}}` {
				t.Errorf("ping during the wait: got %s; want its empty result", got)
			}
			if got := w.requestLines(8, ""); len(got) != 0 {
				t.Fatalf("before the send: got %q; want no answer yet", got)
			}
			mustSend(t, other, w.gid, "ctx-a", "alice", "wake up, bob", nil)
			sent := time.Now()
			lines := w.awaitAnswer(t, 8, "")
			t.Logf("send answered → wait_for_messages answered: %v", time.Since(sent))
			v, isErr := waitAnswer(t, lines[0])
			if got := messageTexts(v); isErr || len(got) != 1 || got[0] != "wake up, bob" {
				t.Errorf("wait_for_messages: got %v (isError %v); want the new message", got, isErr)
			}
			if tc.events {
				waitUntil(t, "the watch stopped after the wait", func() bool { return !w.s.changes.watching() })
			}
		})
	}
}

func TestWaitForMessagesTimesOutEmpty(t *testing.T) {
	w := newWaitSession(t, 20*time.Millisecond)
	start := time.Now()
	w.startWait(t, 3, map[string]any{"timeout_seconds": 0.2}, nil)
	lines := w.awaitAnswer(t, 3, "")
	if elapsed := time.Since(start); elapsed < 200*time.Millisecond {
		t.Errorf("answered after %v; want no sooner than the 0.2 s timeout", elapsed)
	}
	if want := `{"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": "{\"messages\": []}"}], "isError": false}}`; lines[0] != want {
		t.Errorf("timeout answer: got %s; want %s", lines[0], want)
	}
}

func TestWaitForMessagesCancel(t *testing.T) {
	w := newWaitSessionKeepalive(t, 20*time.Millisecond, 10*time.Millisecond)
	w.startWait(t, 4, map[string]any{"timeout_seconds": 30}, map[string]any{"progressToken": "p4"})
	for len(w.requestLines(4, `"p4"`)) == 0 { // a keepalive: the wait is running
		w.rec.waitLines(t, len(w.rec.snapshot())+1)
	}
	exchangeLine(t, w.s, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}`)
	after := len(w.requestLines(4, `"p4"`))
	mustSend(t, w.s, w.gid, "ctx-a", "alice", "too late", nil)
	w.s.inflight.close() // waits for the request's goroutine to end
	if got := w.requestLines(4, `"p4"`); len(got) != after {
		t.Errorf("written after the cancel: got %q; want nothing", got[after:])
	}
	for _, line := range w.requestLines(4, `"p4"`) {
		if !strings.Contains(line, `"method": "notifications/progress"`) {
			t.Errorf("before the cancel: got %s; want only progress notifications", line)
		}
	}
	// The cancelled wait did not take the message that came after it.
	if got := messageTexts(mustCall(t, w.s, "get_unread_messages", map[string]any{"group_id": w.gid, "context_id": "ctx-b", "name": "bob"})); len(got) != 1 {
		t.Errorf("unread after the cancel: got %v; want the message", got)
	}
}

// TestCancelKeyIsExact shows that notifications/cancelled names its request
// by the exact key requestId: JSON keys are case-sensitive, so a cancel with
// "RequestID" leaves the wait running, and it answers with the mail.
func TestCancelKeyIsExact(t *testing.T) {
	w := newWaitSession(t, 20*time.Millisecond)
	w.startWait(t, 4, map[string]any{"timeout_seconds": 30}, nil)
	exchangeLine(t, w.s, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"RequestID":4}}`)
	mustSend(t, w.s, w.gid, "ctx-a", "alice", "still waited for", nil)
	lines := w.awaitAnswer(t, 4, "")
	if v, isError := waitAnswer(t, lines[len(lines)-1]); isError || len(messageTexts(v)) != 1 {
		t.Errorf("answer: got %v (isError %v); want the message", v, isError)
	}
}

// TestWaitForMessagesCancelWhileBusy cancels a wait whose read is retrying
// on a group another process is writing: once the lock is free, the read
// must not mark the mail read, since no answer will carry it.
func TestWaitForMessagesCancelWhileBusy(t *testing.T) {
	w := newWaitSession(t, time.Hour)
	mustSend(t, w.s, w.gid, "ctx-a", "alice", "@bob important", nil)
	release := holdWriteLock(t, groupFile(w.dir, w.gid))
	w.startWait(t, 4, map[string]any{"timeout_seconds": 30}, nil)
	time.Sleep(300 * time.Millisecond) // the wait's read is retrying busy
	exchangeLine(t, w.s, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}`)
	release()
	w.s.inflight.close()
	if got := w.requestLines(4, ""); len(got) != 0 {
		t.Fatalf("answered after the cancel: %q", got)
	}
	if got := messageTexts(mustCall(t, w.s, "get_unread_messages", map[string]any{"group_id": w.gid, "context_id": "ctx-b", "name": "bob"})); len(got) != 1 {
		t.Errorf("unread after a cancelled wait: got %v; want the message", got)
	}
}

func TestWaitForMessagesProgress(t *testing.T) {
	for _, tc := range []struct {
		name  string
		meta  map[string]any
		token string // "" = no progress notifications wanted
	}{
		{"string token", map[string]any{"progressToken": "tok"}, `"tok"`},
		{"number token", map[string]any{"progressToken": 12}, `12`},
		{"no token", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWaitSessionKeepalive(t, 20*time.Millisecond, 20*time.Millisecond)
			w.startWait(t, 5, map[string]any{"timeout_seconds": 0.3}, tc.meta)
			var progress []int
			token := tc.token
			if token == "" {
				token = `"tok"` // to catch progress sent with no token given
			}
			lines := w.awaitAnswer(t, 5, token)
			for _, line := range lines[:len(lines)-1] {
				var n struct {
					Method string `json:"method"`
					Params struct {
						Token    json.RawMessage `json:"progressToken"`
						Progress int             `json:"progress"`
					} `json:"params"`
				}
				if err := json.Unmarshal([]byte(line), &n); err != nil || n.Method != "notifications/progress" || string(n.Params.Token) != tc.token {
					t.Fatalf("before the answer: got %s; want notifications/progress with token %s", line, tc.token)
				}
				progress = append(progress, n.Params.Progress)
			}
			if tc.token == "" && len(progress) != 0 {
				t.Errorf("progress without a token: got %v; want none", progress)
			}
			if tc.token != "" && len(progress) < 2 {
				t.Errorf("keepalives in 0.3 s at 20 ms: got %v; want several", progress)
			}
			for i := 1; i < len(progress); i++ {
				if progress[i] <= progress[i-1] {
					t.Errorf("progress values: got %v; want increasing", progress)
				}
			}
		})
	}
}

// TestWaitForMessagesAuthorization holds the tool to get_unread_messages'
// identity checks: the same arguments fail with the same error at once.
func TestWaitForMessagesAuthorization(t *testing.T) {
	w := newWaitSession(t, time.Hour)
	for i, tc := range []struct {
		name string
		args map[string]any
	}{
		{"not a member", map[string]any{"context_id": "ctx-x", "name": "mallory"}},
		{"wrong name", map[string]any{"context_id": "ctx-b", "name": "alice"}},
		{"blank context_id", map[string]any{"context_id": " ", "name": "bob"}},
		{"missing group", map[string]any{"group_id": "grp_" + strings.Repeat("0", 32)}},
		{"invalid group", map[string]any{"group_id": "nope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := map[string]any{"group_id": w.gid, "context_id": "ctx-b", "name": "bob"}
			for k, v := range tc.args {
				args[k] = v
			}
			want, wantErr := callTool(t, w.s, "get_unread_messages", with(args, "caller_name", "test"))
			if !wantErr {
				t.Fatalf("get_unread_messages(%v) succeeded; the case is wrong", args)
			}
			id := 100 + i
			w.startWait(t, id, with(args, "timeout_seconds", 30), nil)
			lines := w.awaitAnswer(t, id, "")
			got, isErr := waitAnswer(t, lines[0])
			if !isErr || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("got %v (isError %v); want %v as get_unread_messages answers", got, isErr, want)
			}
		})
	}
}

func TestWaitTimeoutArgument(t *testing.T) {
	for _, tc := range []struct {
		raw  string // the timeout_seconds JSON, "" = absent
		want time.Duration
		ok   bool
	}{
		{"", 25 * time.Second, true},
		{"null", 25 * time.Second, true},
		{"0", 0, true},
		{"2.5", 2500 * time.Millisecond, true},
		{"50", 50 * time.Second, true},
		{"3600", 50 * time.Second, true},
		{"1e400", 50 * time.Second, true},
		{"1e-400", 0, true},
		{"-1", 0, false},
		{"-1e400", 0, false},
		{`"10"`, 0, false},
		{"true", 0, false},
		{"[1]", 0, false},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			obj := `{}`
			if tc.raw != "" {
				obj = `{"timeout_seconds": ` + tc.raw + `}`
			}
			a, _ := parseArgs(json.RawMessage(obj))
			got, err := a.waitTimeout()
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("got %v (%v); want %v (ok %v)", got, err, tc.want, tc.ok)
			}
		})
	}
}

// TestWaitForMessagesModern checks a 2026-07-28 request: the answer comes
// from the in-flight table with the revision's result fields.
func TestWaitForMessagesModern(t *testing.T) {
	w := newWaitSession(t, 20*time.Millisecond)
	mustSend(t, w.s, w.gid, "ctx-a", "alice", "modern hello", nil)
	w.startWait(t, 6, nil, map[string]any{metaProtocolVersion: revModern, metaClientCapabilities: map[string]any{}})
	var msg struct {
		Result struct {
			ResultType        string         `json:"resultType"`
			StructuredContent map[string]any `json:"structuredContent"`
		} `json:"result"`
	}
	line := w.awaitAnswer(t, 6, "")[0]
	if err := json.Unmarshal([]byte(line), &msg); err != nil || msg.Result.ResultType != "complete" {
		t.Fatalf("answer: got %s; want a complete 2026-07-28 result", line)
	}
	if got := messageTexts(msg.Result.StructuredContent); len(got) != 1 || got[0] != "modern hello" {
		t.Errorf("structuredContent: got %v; want the message", got)
	}
}
