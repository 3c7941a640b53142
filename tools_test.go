package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// callTool runs a tool in-process with args (caller_name added) and returns the
// decoded result JSON and whether it is an error result.
func callTool(t *testing.T, s *server, tool string, args map[string]any) (map[string]any, bool) {
	t.Helper()
	if _, ok := args["caller_name"]; !ok {
		args["caller_name"] = "test"
	}
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	a, ok := parseArgs(raw)
	if !ok {
		t.Fatalf("args %s are not an object", raw)
	}
	res := runTool(t, s, tool, a)
	var out map[string]any
	if err := json.Unmarshal([]byte(pyJSON(res.value)), &out); err != nil {
		t.Fatal(err)
	}
	return out, res.isError
}

// runTool runs a tools/call of tool with arguments a as toolsCall does,
// through prepareCall and the tool, and returns its result.
func runTool(t *testing.T, s *server, tool string, a toolArgs) toolResult {
	t.Helper()
	params, err := json.Marshal(map[string]any{"name": tool, "arguments": json.RawMessage(a.raw)})
	if err != nil {
		t.Fatal(err)
	}
	pc := s.prepareCall(request{id: json.RawMessage("1"), method: "tools/call", params: params})
	if pc.rerr != nil {
		t.Fatalf("%s: got JSON-RPC error %q; want a tool result", tool, pc.rerr.message)
	}
	if pc.tool != nil {
		pc.call.result = pc.tool.run(s, pc.call.args)
	}
	return pc.call.result
}

// mustCall is callTool that fails the test on an error result.
func mustCall(t *testing.T, s *server, tool string, args map[string]any) map[string]any {
	t.Helper()
	out, isErr := callTool(t, s, tool, args)
	if isErr {
		t.Fatalf("%s(%v): %v", tool, args, out["error"])
	}
	return out
}

func mustCreateGroup(t *testing.T, s *server, creator string) string {
	t.Helper()
	return mustCall(t, s, "create_group", map[string]any{"context_id": creator, "name": "team"})["group_id"].(string)
}

func mustJoin(t *testing.T, s *server, g, contextID, name string) {
	t.Helper()
	mustCall(t, s, "join_group", map[string]any{"group_id": g, "context_id": contextID, "name": name})
}

func mustSend(t *testing.T, s *server, g, contextID, name, text string, extra map[string]any) map[string]any {
	t.Helper()
	args := map[string]any{"group_id": g, "context_id": contextID, "name": name, "message": text}
	for k, v := range extra {
		args[k] = v
	}
	return mustCall(t, s, "send_message", args)
}

func TestArgumentErrors(t *testing.T) {
	s, _ := newTestServer(t)
	g := mustCreateGroup(t, s, "alice")
	mustJoin(t, s, g, "alice", "Alice")
	id := map[string]any{"group_id": g, "context_id": "alice", "name": "Alice"}
	with := func(extra map[string]any) map[string]any {
		m := map[string]any{}
		for k, v := range id {
			m[k] = v
		}
		for k, v := range extra {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	tests := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"get_users", map[string]any{}, "Missing required input: group_id"},
		{"get_users", map[string]any{"group_id": g, "extra": 1}, "Unknown argument: extra"},
		{"get_users", map[string]any{"Group_ID": g}, "Unknown argument: Group_ID"},
		{"join_group", map[string]any{"group_id": g, "Context_ID": "bob", "name": "Bob"}, "Unknown argument: Context_ID"},
		{"join_group", map[string]any{"group_id": g, "name": "Bob"}, "Missing required input: context_id"},
		{"get_users", map[string]any{"group_id": 5}, "Invalid group_id."},
		{"get_users", map[string]any{"group_id": "../../etc/passwd"}, "Invalid group_id."},
		{"get_users", map[string]any{"group_id": "grp_" + strings.Repeat("G", 32)}, "Invalid group_id."},
		{"get_users", map[string]any{"group_id": "grp_" + strings.Repeat("A", 32)}, "Invalid group_id."},
		{"get_users", map[string]any{"group_id": "grp_/" + strings.Repeat("a", 31)}, "Invalid group_id."},
		{"get_users", map[string]any{"group_id": "grp_" + strings.Repeat("0", 32)}, "Group does not exist: grp_00000000000000000000000000000000. Create it first or check the group_id."},
		{"create_group", map[string]any{"context_id": " "}, "context_id must be a non-empty string."},
		{"create_group", map[string]any{"context_id": 7}, "context_id must be a non-empty string."},
		{"create_group", map[string]any{"context_id": "a", "name": 5}, "name and description must be strings."},
		{"create_group", map[string]any{"context_id": "a", "description": []int{}}, "name and description must be strings."},
		{"update_group_metadata", map[string]any{"group_id": g, "context_id": "alice"}, "Provide name and/or description to update group metadata."},
		{"update_group_metadata", map[string]any{"group_id": g, "context_id": "alice", "name": nil}, "Provide name and/or description to update group metadata."},
		{"update_group_metadata", map[string]any{"group_id": g, "context_id": "alice", "name": 1}, "name must be a string."},
		{"update_group_metadata", map[string]any{"group_id": g, "context_id": "alice", "description": true}, "description must be a string."},
		{"update_group_metadata", map[string]any{"group_id": g, "context_id": "bob", "name": "x"}, "Only the context that created this group can update its metadata."},
		{"delete_group", map[string]any{"group_id": g, "context_id": "bob"}, "Only the context that created this group can delete it."},
		{"delete_group", map[string]any{"group_id": "grp_" + strings.Repeat("1", 32), "context_id": "alice"}, "Group does not exist: grp_11111111111111111111111111111111. It may already have been deleted."},
		{"join_group", with(map[string]any{"name": ""}), "name must be a non-empty string."},
		{"join_group", with(map[string]any{"context_id": false}), "context_id must be a non-empty string."},
		{"send_message", with(map[string]any{"message": "  "}), "message must be a non-empty string."},
		{"send_message", with(map[string]any{"message": "hi", "priority": "meh"}), "priority must be one of: low, normal, high, urgent."},
		{"send_message", with(map[string]any{"message": "hi", "wake_context_ids": "bob"}), "wake_context_ids must be an array of non-empty context IDs."},
		{"send_message", with(map[string]any{"message": "hi", "wake_context_ids": []any{"bob", " "}}), "wake_context_ids must be an array of non-empty context IDs."},
		{"send_message", with(map[string]any{"message": "hi", "wake_context_ids": []any{1}}), "wake_context_ids must be an array of non-empty context IDs."},
		{"send_message", with(map[string]any{"message": "hi", "name": "Mallory"}), "name does not match this context's joined group name. Call join_group to update it."},
		{"send_message", with(map[string]any{"message": "hi", "context_id": "bob"}), "Context has not joined this group. Call join_group first."},
		{"get_messages_after", with(map[string]any{"after_message_id": -1}), "after_message_id must be a non-negative integer."},
		{"get_messages_after", with(map[string]any{"after_message_id": 1.5}), "after_message_id must be a non-negative integer."},
		{"get_messages_after", with(map[string]any{"after_message_id": "1"}), "after_message_id must be a non-negative integer."},
		{"get_messages_after", with(map[string]any{"after_message_id": true}), "after_message_id must be a non-negative integer."},
		{"get_messages_after", with(map[string]any{"after_message_id": json.Number("1e2")}), "after_message_id must be a non-negative integer."},
		{"get_messages_after", with(map[string]any{"after_message_id": json.Number("99999999999999999999")}), "after_message_id must be a non-negative integer."},
		{"search_messages", with(map[string]any{"query": " "}), "query must be a non-empty string."},
		{"leave_group", with(map[string]any{"context_id": "bob", "name": "Bob"}), "Context has not joined this group. Call join_group first."},
	}
	t.Run("null priority", func(t *testing.T) {
		a, _ := parseArgs([]byte(`{"caller_name":"c","group_id":"` + g + `","context_id":"alice","name":"Alice","message":"hi","priority":null}`))
		if res := runTool(t, s, "send_message", a); !res.isError || pyJSON(res.value) != `{"error": "priority must be one of: low, normal, high, urgent."}` {
			t.Errorf("got %s; want the priority error", pyJSON(res.value))
		}
	})
	for _, tt := range tests {
		t.Run(tt.tool+" "+tt.want, func(t *testing.T) {
			out, isErr := callTool(t, s, tt.tool, tt.args)
			if !isErr || out["error"] != tt.want {
				t.Errorf("%s(%v): got %v (isError %v); want error %q", tt.tool, tt.args, out, isErr, tt.want)
			}
		})
	}
}

func TestErrorCategories(t *testing.T) {
	s, _ := newTestServer(t)
	g := mustCreateGroup(t, s, "alice")
	run := func(tool string, args map[string]any) string {
		args["caller_name"] = "c"
		raw, _ := json.Marshal(args)
		a, _ := parseArgs(raw)
		return runTool(t, s, tool, a).category
	}
	tests := []struct {
		name, tool string
		args       map[string]any
		want       string
	}{
		{"success", "get_users", map[string]any{"group_id": g}, ""},
		{"validation", "get_users", map[string]any{"group_id": "x"}, categoryValidation},
		{"unknown tool", "nope", map[string]any{}, categoryValidation},
		{"not found", "get_users", map[string]any{"group_id": "grp_" + strings.Repeat("0", 32)}, categoryNotFound},
		{"authorization", "delete_group", map[string]any{"group_id": g, "context_id": "eve"}, categoryAuthorization},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := run(tt.tool, tt.args); got != tt.want {
				t.Errorf("got category %q; want %q", got, tt.want)
			}
		})
	}
}

func TestToolsListSchemas(t *testing.T) {
	s, _ := newTestServer(t)
	initializeSession(t, s)
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
	if err := json.Unmarshal([]byte(exchangeLine(t, s, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)), &resp); err != nil {
		t.Fatal(err)
	}
	want := []string{"create_group", "list_groups", "get_group_metadata", "update_group_metadata", "get_users", "delete_group",
		"join_group", "leave_group", "get_all_messages", "get_latest_messages", "get_unread_messages", "get_messages_after",
		"search_messages", "send_message", "wait_for_messages"}
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
