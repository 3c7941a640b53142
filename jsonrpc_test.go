package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// newTestServer returns a server on a fresh groups directory whose poller
// never fires during the test, and the buffer its output goes to.
func newTestServer(t *testing.T) (*server, *bytes.Buffer) {
	t.Helper()
	st := newTestStore(t, t.TempDir())
	var out bytes.Buffer
	s := newServer(st, &out, newServerConfig(version, time.Hour))
	t.Cleanup(func() { s.subs.close() }) // before the store's, which was registered first
	return s, &out
}

// initializeSession initializes s the way a client does.
func initializeSession(t *testing.T, s *server) {
	t.Helper()
	exchangeLine(t, s, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`)
	exchangeLine(t, s, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// exchangeLine handles one input line and returns what the server writes for
// it, without the trailing newline ("" when nothing is written).
func exchangeLine(t *testing.T, s *server, line string) string {
	t.Helper()
	reply := s.handleLine([]byte(line))
	if reply == nil {
		return ""
	}
	return pyJSON(reply)
}

func TestServeFraming(t *testing.T) {
	t.Run("answers in order and exits on EOF", func(t *testing.T) {
		s, out := newTestServer(t)
		in := strings.Join([]string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			`{"jsonrpc":"2.0","id":2,"method":"ping"}`,
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_groups","arguments":{"caller_name":"c"}}}`,
			`{"jsonrpc":"2.0","id":4,"method":"ping"}`, // no trailing newline
		}, "\n")
		if err := s.serve(strings.NewReader(in)); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != 4 {
			t.Fatalf("got %d lines; want 4:\n%s", len(lines), out)
		}
		for i, line := range lines {
			if id := decodeJSON(t, line)["id"]; id != float64(i+1) {
				t.Errorf("line %d: got id %v; want %d", i, id, i+1)
			}
		}
	})
	t.Run("16 MiB message in one line", func(t *testing.T) {
		s, out := newTestServer(t)
		initializeSession(t, s)
		g := mustCreateGroup(t, s, "alice")
		mustJoin(t, s, g, "alice", "Alice")
		body := strings.Repeat("ünïcødé ", 16<<20/len("ünïcødé "))
		args, _ := json.Marshal(map[string]any{"caller_name": "c", "group_id": g, "context_id": "alice", "name": "Alice", "message": body})
		in := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_message","arguments":` + string(args) + "}}\n" +
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_all_messages","arguments":{"caller_name":"c","group_id":"` + g + `","context_id":"alice","name":"Alice"}}}` + "\n"
		if len(in) < 16<<20 {
			t.Fatalf("request is %d bytes; want at least 16 MiB", len(in))
		}
		if err := s.serve(strings.NewReader(in)); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("got %d lines; want 2", len(lines))
		}
		msgs := toolText(t, lines[1])["messages"].([]any)
		if got := msgs[0].(map[string]any)["message"]; got != body {
			t.Errorf("got a %d-byte message back; want the %d bytes sent", len(got.(string)), len(body))
		}
	})
	t.Run("write failure ends serving", func(t *testing.T) {
		st := newTestStore(t, t.TempDir())
		r, w := io.Pipe()
		r.Close()
		s := newServer(st, w, newServerConfig(version, time.Hour))
		defer s.subs.close()
		if err := s.serve(strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")); err == nil {
			t.Error("got nil error writing to a closed pipe; want an error")
		}
	})
}

func decodeJSON(t *testing.T, line string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("decode %q: %v", line, err)
	}
	return m
}

// toolText decodes the JSON text of a tools/call response line.
func toolText(t *testing.T, line string) map[string]any {
	t.Helper()
	result := decodeJSON(t, line)["result"].(map[string]any)
	text := result["content"].([]any)[0].(map[string]any)["text"].(string)
	return decodeJSON(t, text)
}

// TestLineAllowsOnlyJSONWhitespace shows that only JSON's own whitespace (space,
// tab, CR, LF) may surround a message, as in the original's json.loads: a
// line with a form feed, a vertical tab or a Unicode space around its JSON
// is a parse error, on the plain path and the pipelined-send path alike,
// and nothing it asks for runs.
func TestLineAllowsOnlyJSONWhitespace(t *testing.T) {
	s, out := newTestServer(t)
	initializeSession(t, s)
	g := mustCreateGroup(t, s, "alice")
	mustJoin(t, s, g, "alice", "Alice")
	send := crashCall(2, "send_message", map[string]any{"group_id": g, "context_id": "alice", "name": "Alice", "message": "hi"})
	in := "\f" + `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n" + "\v" + send + "\n" + send + "\u00a0\n" +
		`{"jsonrpc":"2.0","id":3,"method":"ping"}` + "\u2028\n" + " \t" + `{"jsonrpc":"2.0","id":4,"method":"ping"}` + "\r\n"
	out.Reset()
	if err := s.serve(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	const parseError = `{"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}}`
	want := strings.Repeat(parseError+"\n", 4) + `{"jsonrpc": "2.0", "id": 4, "result": {}}` + "\n"
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
	if msgs := mustCall(t, s, "get_all_messages", map[string]any{"group_id": g, "context_id": "alice", "name": "Alice"})["messages"].([]any); len(msgs) != 0 {
		t.Errorf("stored %d messages from lines that are not JSON; want none", len(msgs))
	}
}
