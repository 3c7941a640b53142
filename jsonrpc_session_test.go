package main

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

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
			{`{"jsonrpc":"2\u002e0","id":1,"method":"ping"}`, `{"jsonrpc": "2.0", "id": 1, "result": {}}`},
			{`{"jsonrpc":2.0,"id":1,"method":"ping"}`, `{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid Request"}}`},
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
			{`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait_for_messages","arguments":{}}}]`, `{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "wait_for_messages must not be sent in a batch; send it alone"}}`},
			{`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_groups","arguments":{"caller_name":"wait_for_messages"}}}]`, `[{"jsonrpc": "2.0", "id": 1, "error": {"code": -32002, "message": "Server is not initialized"}}]`},
			{`[{"jsonrpc":"2.0","id":1,"method":"ping"},1,{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`, `[{"jsonrpc": "2.0", "id": 1, "result": {}}, {"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid Request"}}, {"jsonrpc": "2.0", "id": 2, "error": {"code": -32002, "message": "Server is not initialized"}}]`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			for _, step := range tt.steps {
				if got := exchangeLine(t, s, step[0]); got != step[1] {
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
			got := decodeJSON(t, exchangeLine(t, s, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+tt.client+`"}}`))
			if v := got["result"].(map[string]any)["protocolVersion"]; v != tt.want {
				t.Errorf("got %v; want %s", v, tt.want)
			}
		})
	}
}

func TestRequestsAfterInitialization(t *testing.T) {
	s, _ := newTestServer(t)
	initializeSession(t, s)
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
		if got := exchangeLine(t, s, tt.line); got != tt.want {
			t.Errorf("%s:\ngot  %s\nwant %s", tt.line, got, tt.want)
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
		{"1e-12", time.Millisecond}, // a zero Duration made the poller's ticker panic
		{"1e300", math.MaxInt64},
	} {
		if got := pollInterval(tt.in); got != tt.want {
			t.Errorf("pollInterval(%q): got %v; want %v", tt.in, got, tt.want)
		}
	}
}

// TestLifecycleConcurrentRequests drives one session from several goroutines,
// as a concurrent transport may: requests racing initialize and
// notifications/initialized are refused as not initialized or answered, never
// anything else, and once ready every request is answered. Under -race it
// also shows the lifecycle fields are guarded.
func TestLifecycleConcurrentRequests(t *testing.T) {
	s, _ := newTestServer(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				reply := pyJSON(s.handleLine([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":"g%d-%d","method":"tools/list"}`, g, i))))
				switch {
				case strings.Contains(reply, `"tools": [`):
					return
				case strings.Contains(reply, `"code": -32002`):
				default:
					t.Errorf("tools/list during start-up: got %s; want the tool list or -32002", reply)
					return
				}
			}
		}()
	}
	if reply := pyJSON(s.handleLine([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}`))); !strings.Contains(reply, `"protocolVersion": "2025-03-26"`) {
		t.Fatalf("initialize: got %s; want protocolVersion 2025-03-26", reply)
	}
	if reply := s.handleLine([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); reply != nil {
		t.Fatalf("notifications/initialized: got %s; want no answer", pyJSON(reply))
	}
	wg.Wait()
}
