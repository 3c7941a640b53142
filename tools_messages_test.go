package main

import (
	"database/sql"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestRoutingThroughSendMessage(t *testing.T) {
	s, _ := newTestServer(t)
	g := mustCreateGroup(t, s, "alice")
	mustJoin(t, s, g, "alice", "Alice")
	mustJoin(t, s, g, "bob", "Bob")
	mustJoin(t, s, g, "carol/1", "Carol")
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
			out := mustSend(t, s, g, "alice", "Alice", tt.text, extra)
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
	g := mustCreateGroup(t, s, "alice")
	mustJoin(t, s, g, "alice", "Alice")
	mustSend(t, s, g, "alice", "Alice", "before bob joined", nil)
	mustJoin(t, s, g, "bob", "Bob")
	mustSend(t, s, g, "alice", "Alice", "100% sure", nil)
	mustSend(t, s, g, "bob", "Bob", "my own message", nil)
	mustSend(t, s, g, "alice", "Alice", "Snake_case AND MIXED", nil)
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
	mustJoin(t, s, g, "bob", "Bob")
	mustJoin(t, s, g, "bob", "Robert")
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
	if out, isErr := callTool(t, s, "get_group_metadata", map[string]any{"group_id": g}); !isErr || !strings.HasPrefix(out["error"].(string), "Group does not exist") {
		t.Errorf("metadata after delete: got %v; want not found", out)
	}
}

func messageIDs(out map[string]any) []int {
	ids := []int{}
	for _, m := range out["messages"].([]any) {
		ids = append(ids, int(m.(map[string]any)["id"].(float64)))
	}
	return ids
}

// TestNothingUnreadWhileAnotherWriterHoldsTheLock shows that a member with
// nothing unread is answered at once while another process holds the
// group's write lock (a huge message being indexed, an sqlite3 shell), as
// the original answers, whose read takes the lock only to mark something;
// it was answered "group is busy" after 3 s.
func TestNothingUnreadWhileAnotherWriterHoldsTheLock(t *testing.T) {
	s, _ := newTestServer(t)
	g := mustCreateGroup(t, s, "alice")
	mustJoin(t, s, g, "alice", "Alice")
	mustJoin(t, s, g, "bob", "Bob")
	holdWriteLock(t, s.store.groupPath(g))
	out, isErr := callTool(t, s, "get_unread_messages", map[string]any{"group_id": g, "context_id": "bob", "name": "Bob"})
	if isErr || len(out["messages"].([]any)) != 0 {
		t.Errorf("get_unread_messages with nothing unread under another's write lock: got %v; want no messages", out)
	}
}
