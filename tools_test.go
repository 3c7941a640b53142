package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// call runs a tool in-process with args (caller_name added) and returns the
// decoded result JSON and whether it is an error result.
func call(t *testing.T, s *server, tool string, args map[string]any) (map[string]any, bool) {
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
	res := s.callTool(tool, a)
	var out map[string]any
	if err := json.Unmarshal([]byte(pyJSON(res.value)), &out); err != nil {
		t.Fatal(err)
	}
	return out, res.isError
}

// mustCall is call that fails the test on an error result.
func mustCall(t *testing.T, s *server, tool string, args map[string]any) map[string]any {
	t.Helper()
	out, isErr := call(t, s, tool, args)
	if isErr {
		t.Fatalf("%s(%v): %v", tool, args, out["error"])
	}
	return out
}

func createGroup(t *testing.T, s *server, creator string) string {
	t.Helper()
	return mustCall(t, s, "create_group", map[string]any{"context_id": creator, "name": "team"})["group_id"].(string)
}

func join(t *testing.T, s *server, g, contextID, name string) {
	t.Helper()
	mustCall(t, s, "join_group", map[string]any{"group_id": g, "context_id": contextID, "name": name})
}

func send(t *testing.T, s *server, g, contextID, name, text string, extra map[string]any) map[string]any {
	t.Helper()
	args := map[string]any{"group_id": g, "context_id": contextID, "name": name, "message": text}
	for k, v := range extra {
		args[k] = v
	}
	return mustCall(t, s, "send_message", args)
}

func messageIDs(out map[string]any) []int {
	ids := []int{}
	for _, m := range out["messages"].([]any) {
		ids = append(ids, int(m.(map[string]any)["id"].(float64)))
	}
	return ids
}

func TestArgumentErrors(t *testing.T) {
	s, _ := newTestServer(t)
	g := createGroup(t, s, "alice")
	join(t, s, g, "alice", "Alice")
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
		if res := s.callTool("send_message", a); !res.isError || pyJSON(res.value) != `{"error": "priority must be one of: low, normal, high, urgent."}` {
			t.Errorf("got %s; want the priority error", pyJSON(res.value))
		}
	})
	for _, tt := range tests {
		t.Run(tt.tool+" "+tt.want, func(t *testing.T) {
			out, isErr := call(t, s, tt.tool, tt.args)
			if !isErr || out["error"] != tt.want {
				t.Errorf("%s(%v): got %v (isError %v); want error %q", tt.tool, tt.args, out, isErr, tt.want)
			}
		})
	}
}

func TestErrorCategories(t *testing.T) {
	s, _ := newTestServer(t)
	g := createGroup(t, s, "alice")
	run := func(tool string, args map[string]any) string {
		args["caller_name"] = "c"
		raw, _ := json.Marshal(args)
		a, _ := parseArgs(raw)
		return s.callTool(tool, a).category
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

func TestRoutingThroughSendMessage(t *testing.T) {
	s, _ := newTestServer(t)
	g := createGroup(t, s, "alice")
	join(t, s, g, "alice", "Alice")
	join(t, s, g, "bob", "Bob")
	join(t, s, g, "carol/1", "Carol")
	tests := []struct {
		text, priority string
		wake           []any
		reason         string
		mentions       []string
		targets        []string
	}{
		{"hello", "normal", nil, "fallback", []string{}, []string{"bob", "carol/1"}},
		{"hi @bob, look", "normal", nil, "mentioned", []string{"bob"}, []string{"bob"}},
		{"hi @BOB", "low", nil, "mentioned", []string{"bob"}, []string{"bob"}},
		{"hi @carol", "normal", nil, "mentioned", []string{"carol/1"}, []string{"carol/1"}},
		{"hi @carol/1!", "normal", nil, "mentioned", []string{"carol/1"}, []string{"carol/1"}},
		{"hi @bobby", "normal", nil, "fallback", []string{}, []string{"bob", "carol/1"}},
		{"@all: standup", "normal", nil, "mentioned", []string{"bob", "carol/1"}, []string{"bob", "carol/1"}},
		{"fire @bob", "urgent", nil, "urgent", []string{"bob"}, []string{"bob", "carol/1"}},
		{"fyi @bob", "urgent", []any{"carol/1"}, "explicit", []string{"bob"}, []string{"carol/1"}},
		{"fyi", "high", []any{"nobody", "alice"}, "fallback", []string{}, []string{"bob", "carol/1"}},
		{"fyi", "normal", []any{"carol/1", "bob"}, "explicit", []string{}, []string{"bob", "carol/1"}},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			extra := map[string]any{"priority": tt.priority}
			if tt.wake != nil {
				extra["wake_context_ids"] = tt.wake
			}
			out := send(t, s, g, "alice", "Alice", tt.text, extra)
			if out["routing_reason"] != tt.reason || out["priority"] != tt.priority {
				t.Errorf("got reason %v priority %v; want %s %s", out["routing_reason"], out["priority"], tt.reason, tt.priority)
			}
			if got := fmt.Sprint(out["mentions"]); got != fmt.Sprint(tt.mentions) {
				t.Errorf("got mentions %s; want %v", got, tt.mentions)
			}
			if got := fmt.Sprint(out["wakeup_targets"]); got != fmt.Sprint(tt.targets) {
				t.Errorf("got targets %s; want %v", got, tt.targets)
			}
		})
	}
}

func TestReadTracking(t *testing.T) {
	s, _ := newTestServer(t)
	g := createGroup(t, s, "alice")
	join(t, s, g, "alice", "Alice")
	send(t, s, g, "alice", "Alice", "before bob joined", nil)
	join(t, s, g, "bob", "Bob")
	send(t, s, g, "alice", "Alice", "100% sure", nil)
	send(t, s, g, "bob", "Bob", "my own message", nil)
	send(t, s, g, "alice", "Alice", "Snake_case AND MIXED", nil)
	bob := map[string]any{"group_id": g, "context_id": "bob", "name": "Bob"}
	unreadCount := func() int {
		var n int
		if err := s.store.withGroup(g, func(db *sql.DB) error {
			return db.QueryRow("SELECT unread_count FROM group_members WHERE context_id = 'bob'").Scan(&n)
		}); err != nil {
			t.Fatalf("read bob's unread_count: %v", err)
		}
		return n
	}
	if got := unreadCount(); got != 3 {
		t.Fatalf("unread_count: got %d; want 3 (own message not unread)", got)
	}
	if got := messageIDs(mustCall(t, s, "search_messages", with(bob, "query", "%sure"))); !reflect.DeepEqual(got, []int{2}) {
		t.Errorf("search %%sure: got %v; want [2]", got)
	}
	if got := messageIDs(mustCall(t, s, "search_messages", with(bob, "query", "snake_CASE and"))); !reflect.DeepEqual(got, []int{4}) {
		t.Errorf("search case-insensitive: got %v; want [4]", got)
	}
	if got := messageIDs(mustCall(t, s, "search_messages", with(bob, "query", "m_own"))); !reflect.DeepEqual(got, []int{}) {
		t.Errorf("search m_own: got %v; want []", got)
	}
	if got := messageIDs(mustCall(t, s, "search_messages", with(bob, "query", "y_own"))); !reflect.DeepEqual(got, []int{3}) {
		t.Errorf("search y_own (_ wildcard): got %v; want [3]", got)
	}
	if got := unreadCount(); got != 1 {
		t.Errorf("unread_count after searches: got %d; want 1", got)
	}
	if got := messageIDs(mustCall(t, s, "get_unread_messages", bob)); !reflect.DeepEqual(got, []int{1}) {
		t.Errorf("unread: got %v; want [1]", got)
	}
	if got := messageIDs(mustCall(t, s, "get_unread_messages", bob)); len(got) != 0 {
		t.Errorf("unread again: got %v; want none", got)
	}
	if got := messageIDs(mustCall(t, s, "get_latest_messages", bob)); !reflect.DeepEqual(got, []int{4}) {
		t.Errorf("latest after own message 3: got %v; want [4]", got)
	}
	if got := messageIDs(mustCall(t, s, "get_messages_after", with(bob, "after_message_id", 2))); !reflect.DeepEqual(got, []int{3, 4}) {
		t.Errorf("after 2: got %v; want [3 4]", got)
	}
	if got := messageIDs(mustCall(t, s, "get_all_messages", bob)); !reflect.DeepEqual(got, []int{1, 2, 3, 4}) {
		t.Errorf("all: got %v; want [1 2 3 4]", got)
	}
	users := mustCall(t, s, "get_users", map[string]any{"group_id": g})["users"].([]any)
	if len(users) != 2 || users[1].(map[string]any)["latest_message_id"] != float64(3) || users[0].(map[string]any)["latest_message_id"] != float64(4) {
		t.Errorf("users: got %v; want alice latest 4, bob latest 3", users)
	}
}

func TestGroupLifecycle(t *testing.T) {
	s, _ := newTestServer(t)
	created := mustCall(t, s, "create_group", map[string]any{"context_id": "alice", "name": "Ops", "description": "on call"})
	g := created["group_id"].(string)
	if created["name"] != "Ops" || created["description"] != "on call" || !timestampPattern.MatchString(created["created_at"].(string)) {
		t.Errorf("create: got %v", created)
	}
	updated := mustCall(t, s, "update_group_metadata", map[string]any{"group_id": g, "context_id": "alice", "description": "escalations"})
	if updated["name"] != "Ops" || updated["description"] != "escalations" {
		t.Errorf("update: got %v; want name kept, description changed", updated)
	}
	list := mustCall(t, s, "list_groups", map[string]any{})["groups"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["description"] != "escalations" {
		t.Errorf("list: got %v; want the updated group", list)
	}
	join(t, s, g, "bob", "Bob")
	join(t, s, g, "bob", "Robert")
	users := mustCall(t, s, "get_users", map[string]any{"group_id": g})["users"].([]any)
	if len(users) != 1 || users[0].(map[string]any)["name"] != "Robert" {
		t.Errorf("rejoin: got %v; want one member renamed Robert", users)
	}
	if out := mustCall(t, s, "leave_group", map[string]any{"group_id": g, "context_id": "bob", "name": "Robert"}); out["left"] != true {
		t.Errorf("leave: got %v", out)
	}
	if out := mustCall(t, s, "delete_group", map[string]any{"group_id": g, "context_id": "alice"}); out["deleted"] != true {
		t.Errorf("delete: got %v", out)
	}
	if list := mustCall(t, s, "list_groups", map[string]any{})["groups"].([]any); len(list) != 0 {
		t.Errorf("list after delete: got %v; want none", list)
	}
	if out, isErr := call(t, s, "get_group_metadata", map[string]any{"group_id": g}); !isErr || !strings.HasPrefix(out["error"].(string), "Group does not exist") {
		t.Errorf("metadata after delete: got %v; want not found", out)
	}
}
