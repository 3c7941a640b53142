package main

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
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
	s := newServer(st, &out, time.Hour)
	t.Cleanup(func() { s.subs.close() }) // before the store's, which was registered first
	return s, &out
}

// ready initializes s the way a client does.
func ready(t *testing.T, s *server) {
	t.Helper()
	exchange(t, s, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`)
	exchange(t, s, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// exchange handles one input line and returns what the server writes for
// it, without the trailing newline ("" when nothing is written).
func exchange(t *testing.T, s *server, line string) string {
	t.Helper()
	reply := s.handleLine([]byte(line))
	if reply == nil {
		return ""
	}
	return pyJSON(reply)
}

func TestLifecycle(t *testing.T) {
	tests := []struct {
		name  string
		steps [][2]string // input line, expected output
	}{
		{"ping before initialize", [][2]string{
			{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `{"jsonrpc": "2.0", "id": 1, "result": {}}`},
		}},
		{"requests before initialize", [][2]string{
			{`{"jsonrpc":"2.0","id":"a","method":"tools/list"}`, `{"jsonrpc": "2.0", "id": "a", "error": {"code": -32002, "message": "Server is not initialized"}}`},
			{`{"jsonrpc":"2.0","id":2,"method":"server/discover"}`, `{"jsonrpc": "2.0", "id": 2, "error": {"code": -32002, "message": "Server is not initialized"}}`},
		}},
		{"initialized notification is required", [][2]string{
			{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`, `{"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-03-26", "capabilities": {"tools": {}, "resources": {"subscribe": true, "listChanged": false}}, "serverInfo": {"name": "crosstalk", "version": "` + version + `"}}}`},
			{`{"jsonrpc":"2.0","id":2,"method":"resources/list"}`, `{"jsonrpc": "2.0", "id": 2, "error": {"code": -32002, "message": "Server is not initialized"}}`},
			{`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`, ``},
			{`{"jsonrpc":"2.0","id":3,"method":"resources/list"}`, `{"jsonrpc": "2.0", "id": 3, "result": {"resources": []}}`},
		}},
		{"initialized before initialize is ignored", [][2]string{
			{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, ``},
			{`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc": "2.0", "id": 1, "error": {"code": -32002, "message": "Server is not initialized"}}`},
		}},
		{"initialize twice", [][2]string{
			{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"x"}}`, `{"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}, "resources": {"subscribe": true, "listChanged": false}}, "serverInfo": {"name": "crosstalk", "title": "Crosstalk", "version": "` + version + `", "description": "` + serverDescription + `", "websiteUrl": "` + serverWebsite + `"}}}`},
			{`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`, `{"jsonrpc": "2.0", "id": 2, "error": {"code": -32600, "message": "Invalid initialize request"}}`},
		}},
		{"initialize without id is ignored", [][2]string{
			{`{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":"2025-03-26"}}`, ``},
			{`{"jsonrpc":"2.0","id":null,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`, ``},
			{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05"}}`, `{"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2024-11-05", "capabilities": {"tools": {}, "resources": {"subscribe": true, "listChanged": false}}, "serverInfo": {"name": "crosstalk", "version": "` + version + `"}}}`},
		}},
		{"initialize params", [][2]string{
			{`{"jsonrpc":"2.0","id":1,"method":"initialize"}`, `{"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "Invalid params: initialize protocolVersion must be a non-empty string."}}`},
			{`{"jsonrpc":"2.0","id":2,"method":"initialize","params":[]}`, `{"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "Invalid params: initialize params must be an object."}}`},
			{`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":" "}}`, `{"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "Invalid params: initialize protocolVersion must be a non-empty string."}}`},
			{`{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":20250326}}`, `{"jsonrpc": "2.0", "id": 4, "error": {"code": -32602, "message": "Invalid params: initialize protocolVersion must be a non-empty string."}}`},
		}},
		{"malformed messages", [][2]string{
			{`{"jsonrpc":"2.0","id":1,"method":`, `{"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}}`},
			{``, `{"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}}`},
			{`{"jsonrpc":"1.0","id":1,"method":"ping"}`, `{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid Request"}}`},
			{`"ping"`, `{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid Request"}}`},
			{`{"jsonrpc":"2.0","id":1,"method":5}`, `{"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": "Invalid Request"}}`},
			{`{"jsonrpc":"2.0","method":5}`, ``},
			{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, `{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid Request"}}`},
			{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, ``},
		}},
		{"batches", [][2]string{
			{`[]`, `{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid Request"}}`},
			{`[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}]`, `{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "initialize must not be sent in a batch"}}`},
			{`[{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","method":"ping"}]`, ``},
			{`[{"jsonrpc":"2.0","id":1,"method":"ping"},1,{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`, `[{"jsonrpc": "2.0", "id": 1, "result": {}}, {"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid Request"}}, {"jsonrpc": "2.0", "id": 2, "error": {"code": -32002, "message": "Server is not initialized"}}]`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			for _, step := range tt.steps {
				if got := exchange(t, s, step[0]); got != step[1] {
					t.Errorf("%s:\ngot  %s\nwant %s", step[0], got, step[1])
				}
			}
		})
	}
}

func TestProtocolVersionNegotiation(t *testing.T) {
	for _, tt := range []struct{ client, want string }{
		{"2024-11-05", "2024-11-05"},
		{"2025-03-26", "2025-03-26"},
		{"2025-06-18", "2025-06-18"},
		{"2025-11-25", "2025-11-25"},
		{"2023-01-01", "2025-11-25"},
		{"2099-01-01", "2025-11-25"},
	} {
		t.Run(tt.client, func(t *testing.T) {
			s, _ := newTestServer(t)
			got := decode(t, exchange(t, s, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+tt.client+`"}}`))
			if v := got["result"].(map[string]any)["protocolVersion"]; v != tt.want {
				t.Errorf("got %v; want %s", v, tt.want)
			}
		})
	}
}

func TestRequestsAfterInitialization(t *testing.T) {
	s, _ := newTestServer(t)
	ready(t, s)
	tests := []struct{ line, want string }{
		{`{"jsonrpc":"2.0","id":1,"method":"nope"}`, `{"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "Method not found: nope"}}`},
		{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, ``},
		{`{"jsonrpc":"2.0","method":"tools/list"}`, ``},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":[]}`, `{"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "Invalid params: tools/call params must be an object."}}`},
		{`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_groups","arguments":[]}}`, `{"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "Invalid params: tools/call arguments must be an object."}}`},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"list_groups"}}`, `{"jsonrpc": "2.0", "id": 4, "error": {"code": -32602, "message": "Invalid params: tools/call caller_name must be a non-empty string."}}`},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"list_groups","arguments":{"caller_name":"  "}}}`, `{"jsonrpc": "2.0", "id": 5, "error": {"code": -32602, "message": "Invalid params: tools/call caller_name must be a non-empty string."}}`},
		{`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"list_groups","arguments":{"Caller_Name":"x"}}}`, `{"jsonrpc": "2.0", "id": 6, "error": {"code": -32602, "message": "Invalid params: tools/call caller_name must be a non-empty string."}}`},
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"list_groups","arguments":{"caller_name":"x"}}}`, `{"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "{\"groups\": []}"}], "isError": false}}`},
		{`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"nope","arguments":{"caller_name":"x"}}}`, `{"jsonrpc": "2.0", "id": 8, "result": {"content": [{"type": "text", "text": "{\"error\": \"Unknown tool: nope\"}"}], "isError": true}}`},
		{`{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":1}}`, `{"jsonrpc": "2.0", "id": 9, "result": {}}`},
		{`{"jsonrpc":"2.0","id":10,"method":"resources/read","params":{"uri":"crosstalk://groups/../../etc/messages"}}`, `{"jsonrpc": "2.0", "id": 10, "error": {"code": -32602, "message": "Invalid params: Invalid group_id."}}`},
		{`{"jsonrpc":"2.0","id":11,"method":"resources/subscribe","params":{"uri":"https://example.com/"}}`, `{"jsonrpc": "2.0", "id": 11, "error": {"code": -32602, "message": "Invalid params: Invalid Crosstalk subscription URI."}}`},
		{`{"jsonrpc":"2.0","id":12,"method":"resources/unsubscribe","params":{"uri":"crosstalk://groups/grp_00000000000000000000000000000000/messages"}}`, `{"jsonrpc": "2.0", "id": 12, "result": {}}`},
		{`{"jsonrpc":"2.0","id":13,"method":"resources/read","params":{"uri":"crosstalk://groups/grp_00000000000000000000000000000000/wakeups/a"}}`, `{"jsonrpc": "2.0", "id": 13, "error": {"code": -32602, "message": "Invalid params: Wakeup resource is not authorized for this MCP session. Call join_group first."}}`},
		{`{"jsonrpc":"2.0","id":14,"method":"resources/subscribe","params":{"uri":"crosstalk://groups/grp_00000000000000000000000000000000/messages"}}`, `{"jsonrpc": "2.0", "id": 14, "error": {"code": -32602, "message": "Invalid params: Group does not exist: grp_00000000000000000000000000000000. Create it first or check the group_id."}}`},
		{`{"jsonrpc":"2.0","id":15,"method":"resources/read","params":{"uri":"crosstalk://groups/grp_00000000000000000000000000000000/wakeups/%20"}}`, `{"jsonrpc": "2.0", "id": 15, "error": {"code": -32602, "message": "Invalid params: Invalid wakeup context ID."}}`},
	}
	for _, tt := range tests {
		if got := exchange(t, s, tt.line); got != tt.want {
			t.Errorf("%s:\ngot  %s\nwant %s", tt.line, got, tt.want)
		}
	}
}

func TestToolsListSchemas(t *testing.T) {
	s, _ := newTestServer(t)
	ready(t, s)
	var resp struct {
		Result struct {
			Tools []struct {
				Name        string `json:"name"`
				Description string `json:"description"`
				InputSchema struct {
					Properties           map[string]map[string]any `json:"properties"`
					Required             []string                  `json:"required"`
					AdditionalProperties *bool                     `json:"additionalProperties"`
				} `json:"inputSchema"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(exchange(t, s, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)), &resp); err != nil {
		t.Fatal(err)
	}
	want := []string{"create_group", "list_groups", "get_group_metadata", "update_group_metadata", "get_users", "delete_group",
		"join_group", "leave_group", "get_all_messages", "get_latest_messages", "get_unread_messages", "get_messages_after",
		"search_messages", "send_message"}
	if len(resp.Result.Tools) != len(want) {
		t.Fatalf("got %d tools; want %d", len(resp.Result.Tools), len(want))
	}
	for i, tool := range resp.Result.Tools {
		if tool.Name != want[i] {
			t.Errorf("tool %d: got %s; want %s", i, tool.Name, want[i])
		}
		schema := tool.InputSchema
		if schema.AdditionalProperties == nil || *schema.AdditionalProperties {
			t.Errorf("%s: additionalProperties is not false", tool.Name)
		}
		if schema.Required[len(schema.Required)-1] != "caller_name" || schema.Properties["caller_name"]["type"] != "string" {
			t.Errorf("%s: caller_name is not a required string", tool.Name)
		}
		for _, r := range schema.Required {
			if _, ok := schema.Properties[r]; !ok {
				t.Errorf("%s: required %s is not a property", tool.Name, r)
			}
		}
	}
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
			if id := decode(t, line)["id"]; id != float64(i+1) {
				t.Errorf("line %d: got id %v; want %d", i, id, i+1)
			}
		}
	})
	t.Run("16 MiB message in one line", func(t *testing.T) {
		s, out := newTestServer(t)
		ready(t, s)
		g := createGroup(t, s, "alice")
		join(t, s, g, "alice", "Alice")
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
		s := newServer(st, w, time.Hour)
		defer s.subs.close()
		if err := s.serve(strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")); err == nil {
			t.Error("got nil error writing to a closed pipe; want an error")
		}
	})
}

func TestPyJSON(t *testing.T) {
	i := int64(7)
	tests := []struct {
		in   any
		want string
	}{
		{object{{"a", 1}, {"b", []any{true, nil}}}, `{"a": 1, "b": [true, null]}`},
		{"tab\tquote\" back\\ nl\n", `"tab\tquote\" back\\ nl\n"`},
		{"é 🎉 \x01 \x7f <&>", `"\u00e9 \ud83c\udf89 \u0001 \u007f <&>"`},
		{"bad \xff byte", `"bad \ufffd byte"`},
		{stringList(nil), `[]`},
		{stringList{"a", "b"}, `["a", "b"]`},
		{&i, `7`},
		{(*string)(nil), `null`},
		{rawJSON(`"id-1"`), `"id-1"`},
	}
	for _, tt := range tests {
		if got := pyJSON(tt.in); got != tt.want {
			t.Errorf("pyJSON(%#v): got %s; want %s", tt.in, got, tt.want)
		}
	}
}

func TestPollInterval(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"", 500 * time.Millisecond},
		{"0.1", 100 * time.Millisecond},
		{"2", 2 * time.Second},
		{"0", 500 * time.Millisecond},
		{"-1", 500 * time.Millisecond},
		{"nan", 500 * time.Millisecond},
		{"inf", 500 * time.Millisecond},
		{"abc", 500 * time.Millisecond},
	} {
		if got := pollInterval(tt.in); got != tt.want {
			t.Errorf("pollInterval(%q): got %v; want %v", tt.in, got, tt.want)
		}
	}
}

func decode(t *testing.T, line string) map[string]any {
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
	result := decode(t, line)["result"].(map[string]any)
	text := result["content"].([]any)[0].(map[string]any)["text"].(string)
	return decode(t, text)
}

// sendLine is a send_message request line; extra adds or replaces arguments.
func sendLine(id any, group, contextID, name, text string, extra ...any) string {
	args := map[string]any{"caller_name": "c", "group_id": group, "context_id": contextID, "name": name, "message": text}
	for i := 0; i+1 < len(extra); i += 2 {
		args[extra[i].(string)] = extra[i+1]
	}
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": "send_message", "arguments": args}})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestPipelinedSendsRuns(t *testing.T) {
	const g, h = "grp_00000000000000000000000000000001", "grp_00000000000000000000000000000002"
	many := make([]string, 70)
	for i := range many {
		many[i] = sendLine(i, g, "a", "A", "hi")
	}
	tests := []struct {
		name     string
		notReady bool
		lines    []string
		want     []int // per chunk serve handles: a run's length, or 0 for a line answered alone
	}{
		{"sends to one group", false, []string{sendLine(1, g, "a", "A", "x"), sendLine(2, g, "b", "B", "y"), sendLine(3, g, "a", "A", "z")}, []int{3}},
		{"run is bounded", false, many, []int{64, 6}},
		{"another group starts a new run", false, []string{sendLine(1, g, "a", "A", "x"), sendLine(2, g, "a", "A", "x"), sendLine(3, h, "a", "A", "x")}, []int{2, 1}},
		{"another tool ends a run", false, []string{sendLine(1, g, "a", "A", "x"),
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_unread_messages","arguments":{"caller_name":"c","group_id":"` + g + `","context_id":"a","name":"A"}}}`,
			sendLine(3, g, "a", "A", "x")}, []int{1, 0, 1}},
		{"a send with bad arguments is answered alone", false, []string{sendLine(1, g, "a", "A", "x"), sendLine(2, g, "a", "A", "x", "priority", "loud"),
			sendLine(3, g, "a", "A", "x", "Context_ID", "a"), sendLine(4, g, "a", "A", " "), sendLine(5, g, "a", "A", "x")}, []int{1, 0, 0, 0, 1}},
		{"an invalid group id is answered alone", false, []string{sendLine(1, "grp_X", "a", "A", "x"), sendLine(2, "../x", "a", "A", "x")}, []int{0, 0}},
		{"notifications and batches are not run", false, []string{sendLine(nil, g, "a", "A", "x"), "[" + sendLine(1, g, "a", "A", "x") + "]",
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"send_message","arguments":{"caller_name":" "}}}`}, []int{0, 0, 0}},
		{"not before initialization", true, []string{sendLine(1, g, "a", "A", "x"), sendLine(2, g, "a", "A", "x")}, []int{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			s.ready = !tt.notReady
			r := bufio.NewReaderSize(strings.NewReader(strings.Join(tt.lines, "\n")+"\n"), 64<<10)
			var got []int
			for {
				line, err := r.ReadBytes('\n')
				if len(line) > 0 {
					got = append(got, len(s.pipelinedSends(line, r)))
				}
				if err != nil {
					break
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got runs %v; want %v", got, tt.want)
			}
		})
	}
}

// groupCommitServer is a ready server whose store has a fixed clock and a
// group with members a, b and c, whose id is fixed so that two such servers
// write the same bytes. A runLimit of 0 keeps the server's default.
func groupCommitServer(t *testing.T, runLimit int) (*server, *bytes.Buffer, string) {
	t.Helper()
	s, out := newTestServer(t)
	s.store.now = func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 123456000, time.UTC) }
	if runLimit > 0 {
		s.sendRunLimit = runLimit
	}
	ready(t, s)
	const g = "grp_0123456789abcdef0123456789abcdef"
	if err := s.store.initGroup(s.store.groupPath(g), "a", "commit", ""); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"a", "b", "c"} {
		if err := s.store.joinGroup(g, m, strings.ToUpper(m)); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	return s, out, g
}

// groupDump lists every row a send writes, so two stores can be compared.
func groupDump(t *testing.T, s *store, g string) string {
	t.Helper()
	var b strings.Builder
	err := s.withGroup(g, func(db *sql.DB) error {
		for _, q := range []string{
			"SELECT * FROM messages ORDER BY id",
			"SELECT * FROM member_unread_messages ORDER BY context_id, message_id",
			"SELECT * FROM group_members ORDER BY context_id",
			"SELECT * FROM wakeup_events ORDER BY id",
			"SELECT * FROM group_message_metrics ORDER BY metric, value",
			"SELECT * FROM group_state",
			"SELECT rowid FROM message_search WHERE message_search MATCH 'ell' ORDER BY rowid",
			"PRAGMA integrity_check",
		} {
			fmt.Fprintf(&b, "%s:\n%s\n", q, strings.Join(queryRows(t, db, q), "\n"))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("dump group %s: %v", g, err)
	}
	return b.String()
}

// TestGroupCommitMatchesOneByOne replays one pipelined session with group
// commit and without: answers, audit records and stored rows must be the same.
func TestGroupCommitMatchesOneByOne(t *testing.T) {
	const g = "grp_0123456789abcdef0123456789abcdef"
	unread := `{"jsonrpc":"2.0","id":"u","method":"tools/call","params":{"name":"get_unread_messages","arguments":{"caller_name":"c","group_id":"` + g + `","context_id":"b","name":"B"}}}`
	lines := []string{
		sendLine(1, g, "a", "A", "hello @b"),
		sendLine(2, g, "b", "B", "hello all", "priority", "urgent"),
		sendLine(3, g, "mallory", "M", "let me in"),
		sendLine(4, g, "a", "Wrong", "wrong name"),
		sendLine(5, g, "a", "A", "wake up", "wake_context_ids", []string{"c"}),
		sendLine("six", g, "c", "C", "@all shell hello"),
		sendLine(7, g, "a", "A", "x", "priority", "loud"),
		sendLine(8, g, "a", "A", "after the invalid one"),
		unread,
		sendLine(nil, g, "a", "A", "a notification is not run"),
		sendLine(10, "grp_ffffffffffffffffffffffffffffffff", "a", "A", "no such group"),
		sendLine(11, g, "b", "B", "last @a @c, hello"),
	}
	in := strings.Join(lines, "\n") + "\n"
	type session struct {
		out, dump string
		audit     []string
		walFrames int64
	}
	run := func(limit int) session {
		s, out, _ := groupCommitServer(t, limit)
		var audit []string
		s.audit = func(c toolCall) {
			audit = append(audit, fmt.Sprintf("%s %s %v %s", c.requestID, c.name, c.result.isError, pyJSON(c.result.value)))
		}
		if err := s.serve(strings.NewReader(in)); err != nil {
			t.Fatal(err)
		}
		wal, err := os.Stat(s.store.groupPath(g) + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		// A WAL file is a 32-byte header and frames of a 24-byte header and
		// one 4096-byte page.
		return session{out.String(), groupDump(t, s.store, g), audit, (wal.Size() - 32) / (24 + 4096)}
	}
	together, alone := run(0), run(1)
	if together.out != alone.out {
		t.Errorf("answers differ\ngroup commit:\n%s\none by one:\n%s", together.out, alone.out)
	}
	if together.dump != alone.dump {
		t.Errorf("stored rows differ\ngroup commit:\n%s\none by one:\n%s", together.dump, alone.dump)
	}
	if fmt.Sprint(together.audit) != fmt.Sprint(alone.audit) {
		t.Errorf("audit differs\ngroup commit:\n%s\none by one:\n%s", strings.Join(together.audit, "\n"), strings.Join(alone.audit, "\n"))
	}
	// The comparison means something only if the session did what it says.
	if n := strings.Count(together.out, "\n"); n != len(lines)-1 {
		t.Errorf("got %d answers; want %d", n, len(lines)-1)
	}
	for _, want := range []string{`\"message_id\": 6`, "Context has not joined this group", "name does not match", "priority must be one of", "Group does not exist"} {
		if !strings.Contains(together.out, want) {
			t.Errorf("answers lack %q", want)
		}
	}
	// Pages that every send changes are written once per transaction; six
	// of the nine stored sends share one here.
	if together.walFrames*4 >= alone.walFrames*3 {
		t.Errorf("got %d WAL frames with group commit, %d without; want fewer than three quarters", together.walFrames, alone.walFrames)
	}
	if len(together.audit) != len(lines)-1 {
		t.Errorf("got %d audited calls; want %d", len(together.audit), len(lines)-1)
	}
}

// TestGroupCommitFailures checks runs whose shared transaction fails: each
// send must get the answer it gets when sent alone.
func TestGroupCommitFailures(t *testing.T) {
	const g = "grp_0123456789abcdef0123456789abcdef"
	tests := []struct {
		name   string
		setup  func(t *testing.T, s *server)
		texts  []string
		want   []string // in the answers, in order
		stored int64    // messages in the group afterwards; -1 when it is gone
		// slow skips the one-by-one session, which would take the retry
		// window once per send.
		slow bool
	}{
		{"a failing statement", func(t *testing.T, s *server) {
			err := s.store.withGroup(g, func(db *sql.DB) error {
				_, err := db.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN NEW.content = 'boom' BEGIN SELECT RAISE(ABORT, 'refused'); END`)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}, []string{"one", "boom", "three"}, []string{`\"message_id\": 1`, "Database error while processing send_message: refused", `\"message_id\": 2`}, 2, false},
		{"a group held locked for 200 ms", func(t *testing.T, s *server) {
			time.AfterFunc(200*time.Millisecond, holdWriteLock(t, s.store.groupPath(g)))
		}, []string{"one", "two", "three"}, []string{`\"message_id\": 1`, `\"message_id\": 2`, `\"message_id\": 3`}, 3, false},
		{"a group held locked past the retry window", func(t *testing.T, s *server) {
			holdWriteLock(t, s.store.groupPath(g))
		}, []string{"one", "two"}, []string{"group is busy", "group is busy"}, 0, true},
		{"a group deleted by another process", func(t *testing.T, s *server) {
			if err := removeDatabaseFiles(s.store.groupPath(g)); err != nil {
				t.Fatal(err)
			}
		}, []string{"one", "two"}, []string{"Group does not exist", "Group does not exist"}, -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in strings.Builder
			for i, text := range tt.texts {
				in.WriteString(sendLine(i+1, g, "a", "A", text) + "\n")
			}
			answers := map[int]string{}
			limits := []int{0, 1}
			if tt.slow {
				limits = limits[:1]
			}
			for _, limit := range limits {
				s, out, _ := groupCommitServer(t, limit)
				tt.setup(t, s)
				if err := s.serve(strings.NewReader(in.String())); err != nil {
					t.Fatal(err)
				}
				answers[limit] = out.String()
				switch {
				case tt.stored >= 0:
					var n int64
					err := s.store.withGroup(g, func(db *sql.DB) error { return db.QueryRow("SELECT COUNT(*) FROM messages").Scan(&n) })
					if err != nil {
						t.Fatalf("count messages: %v", err)
					}
					if n != tt.stored {
						t.Errorf("run limit %d: got %d stored messages; want %d", limit, n, tt.stored)
					}
				case s.store.groupExists(g):
					t.Errorf("run limit %d: got the deleted group back; want it gone", limit)
				}
			}
			if !tt.slow && answers[0] != answers[1] {
				t.Errorf("answers differ\ngroup commit:\n%s\none by one:\n%s", answers[0], answers[1])
			}
			lines := strings.Split(strings.TrimSuffix(answers[0], "\n"), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d answers; want %d:\n%s", len(lines), len(tt.want), answers[0])
			}
			for i, want := range tt.want {
				if !strings.Contains(lines[i], want) {
					t.Errorf("answer %d: got %s; want it to contain %s", i+1, lines[i], want)
				}
			}
		})
	}
}
