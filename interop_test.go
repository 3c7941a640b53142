package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// interopGroup is the group in testdata/interop, written by the Python
// original: alice, bob and Carol, ten messages (mentions, @all, urgent,
// explicit, high priority, unicode, one with % and _), alice's wake events
// acknowledged by get_unread_messages, bob's 6..10 by get_messages_after,
// Carol's none; the WAL was checkpointed before the files were copied.
const interopGroup = "grp_cadcd261ac1a428b90ccb8b7c8633132"

func TestInteropWithOriginalDatabase(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{interopGroup + ".sqlite3", "observability.sqlite3"} {
		copyFile(t, filepath.Join("testdata", "interop", name), filepath.Join(dir, name))
	}
	groupPath := filepath.Join(dir, interopGroup+".sqlite3")
	catalogPath := filepath.Join(dir, "observability.sqlite3")
	groupSchema := interopSchema(t, groupPath)
	catalogSchema := interopSchema(t, catalogPath)
	var catalog [4]string
	interopQueryRow(t, catalogPath, "SELECT name, description, created_at, updated_at FROM groups WHERE group_id = ?",
		[]any{interopGroup}, &catalog[0], &catalog[1], &catalog[2], &catalog[3])
	pythonSentAt := interopStrings(t, groupPath, "SELECT created_at FROM messages ORDER BY id")

	s := startGoldenSession(t, dir, map[string]string{"CROSSTALK_POLL_INTERVAL_SECONDS": "3600"}, nil)
	c := &interopClient{t: t, s: s}
	c.rpc("initialize", map[string]any{"protocolVersion": "2025-03-26"})
	if err := s.write(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		t.Fatal(err)
	}
	bob := map[string]any{"group_id": interopGroup, "context_id": "ctx-bob", "name": "bob"}
	carol := map[string]any{"group_id": interopGroup, "context_id": "ctx-carol", "name": "Carol"}
	alice := map[string]any{"group_id": interopGroup, "context_id": "ctx-alice", "name": "alice"}

	t.Run("list and metadata", func(t *testing.T) {
		want := map[string]any{"group_id": interopGroup, "name": catalog[0], "description": catalog[1],
			"created_at": catalog[2], "updated_at": catalog[3]}
		if catalog[0] != "Interop ✓ Café" {
			t.Errorf("fixture catalog name: got %q; want %q", catalog[0], "Interop ✓ Café")
		}
		list := c.call("list_groups", nil)
		if got := list["groups"]; !reflect.DeepEqual(got, []any{want}) {
			t.Errorf("list_groups: got %v; want [%v]", got, want)
		}
		if got := c.call("get_group_metadata", map[string]any{"group_id": interopGroup}); !reflect.DeepEqual(got, want) {
			t.Errorf("get_group_metadata: got %v; want %v", got, want)
		}
		users := c.call("get_users", map[string]any{"group_id": interopGroup})["users"].([]any)
		var got []string
		for _, u := range users {
			m := u.(map[string]any)
			got = append(got, fmt.Sprintf("%v/%v/%v/%v", m["context_id"], m["name"], m["latest_message_id"],
				timestampPattern.MatchString(fmt.Sprint(m["joined_at"]))))
		}
		want2 := []string{"ctx-alice/alice/9/true", "ctx-bob/bob/8/true", "ctx-carol/Carol/10/true"}
		if !reflect.DeepEqual(got, want2) {
			t.Errorf("get_users: got %v; want %v", got, want2)
		}
	})

	t.Run("search", func(t *testing.T) {
		// alice has read everything, so searching as alice changes nothing;
		// the expected ids are what the original's SQLite returns too.
		for _, tc := range []struct {
			query string
			want  []int
		}{
			{"50%", []int{6}},           // trigram index, literal prefix then wildcard
			{"ITEM_4_", []int{6}},       // _ wildcards, ASCII case folding
			{"MüNCHEN", []int{7}},       // ASCII-only case folding around a non-ASCII letter
			{"MÜNCHEN", nil},            // Ü is not folded
			{"@alice", []int{2, 8}},     // mentions are plain text
			{"%", seq(1, 10)},           // everything
			{"o_k", nil},                // no match
			{"team 👋", []int{1}},        // four-byte character inside a longer pattern
			{"logs", []int{5}},          // short ASCII word
			{"ünïcödé", []int{7}},       // non-ASCII trigram
			{"release at 17", []int{9}}, // digits and spaces
		} {
			got := interopIDs(c.call("search_messages", with(alice, "query", tc.query)))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("search %q: got ids %v; want %v", tc.query, got, tc.want)
			}
		}
	})

	t.Run("unread and mark read", func(t *testing.T) {
		msgs := c.call("get_unread_messages", carol)["messages"].([]any)
		if got, want := interopIDs(map[string]any{"messages": msgs}), []int{1, 2, 4, 5, 7, 8, 9}; !reflect.DeepEqual(got, want) {
			t.Fatalf("Carol's unread: got %v; want %v", got, want)
		}
		m8 := msgs[5].(map[string]any)
		want8 := map[string]any{"id": json.Number("8"), "context_id": "ctx-bob", "name": "bob",
			"message": "@carol, did you see? @alice", "priority": "normal",
			"mentions": []any{"ctx-alice", "ctx-carol"}, "wakeup_targets": []any{"ctx-alice", "ctx-carol"},
			"routing_reason": "mentioned", "sent_at": pythonSentAt[7]}
		if !reflect.DeepEqual(m8, want8) {
			t.Errorf("message 8 as written by Python: got %v; want %v", m8, want8)
		}
		if got := interopIDs(c.call("get_unread_messages", carol)); got != nil {
			t.Errorf("Carol's unread after reading: got %v; want none", got)
		}
		if got, want := interopIDs(c.call("get_unread_messages", bob)), []int{1, 3, 4}; !reflect.DeepEqual(got, want) {
			t.Errorf("bob's unread: got %v; want %v", got, want)
		}
	})

	t.Run("send", func(t *testing.T) {
		got := c.call("send_message", with(bob, "message", "@alice @carol interop from Go ✓ 100%_done"))
		want := map[string]any{"message_id": json.Number("11"), "group_id": interopGroup, "priority": "normal",
			"mentions": []any{"ctx-alice", "ctx-carol"}, "routing_reason": "mentioned",
			"wakeup_targets": []any{"ctx-alice", "ctx-carol"}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("send from bob: got %v; want %v", got, want)
		}
		got = c.call("send_message", with(alice, "message", "plain from Go"))
		if id, rr := got["message_id"], got["routing_reason"]; id != json.Number("12") || rr != "fallback" {
			t.Errorf("send from alice: got id %v routing %v; want 12 fallback", id, rr)
		}
		all := c.call("get_all_messages", alice)["messages"].([]any)
		if len(all) != 12 {
			t.Fatalf("get_all_messages: got %d messages; want 12", len(all))
		}
		for i, sentAt := range pythonSentAt {
			if got := all[i].(map[string]any)["sent_at"]; got != sentAt {
				t.Errorf("message %d sent_at: got %v; want %q as Python stored it", i+1, got, sentAt)
			}
		}
	})

	s.finish(0)

	t.Run("group database keeps the original format", func(t *testing.T) {
		if got := interopString(t, groupPath, "PRAGMA integrity_check"); got != "ok" {
			t.Errorf("integrity_check: got %q; want ok", got)
		}
		if got := interopString(t, groupPath, "PRAGMA user_version"); got != "1" {
			t.Errorf("user_version: got %s; want 1", got)
		}
		if got := interopString(t, groupPath, "PRAGMA journal_mode"); got != "wal" {
			t.Errorf("journal_mode: got %s; want wal", got)
		}
		db := interopOpen(t, groupPath)
		if _, err := db.Exec("INSERT INTO message_search(message_search) VALUES('integrity-check')"); err != nil {
			t.Errorf("message_search integrity-check: %v", err)
		}
		if got := interopSchema(t, groupPath); !reflect.DeepEqual(got, groupSchema) {
			t.Errorf("schema changed:\n got  %v\n want %v", got, groupSchema)
		}
		if got := interopStrings(t, groupPath, "SELECT rowid FROM message_search WHERE content LIKE '%interop from go%'"); !reflect.DeepEqual(got, []string{"11"}) {
			t.Errorf("trigram index lookup of the Go message: got rowids %v; want [11]", got)
		}
		rows := interopStrings(t, groupPath, "SELECT id || '|' || mentions || '|' || wakeup_targets || '|' || routing_reason || '|' || priority FROM messages WHERE id > 10 ORDER BY id")
		wantRows := []string{
			`11|["ctx-alice", "ctx-carol"]|["ctx-alice", "ctx-carol"]|mentioned|normal`,
			`12|[]|["ctx-bob", "ctx-carol"]|fallback|normal`,
		}
		if !reflect.DeepEqual(rows, wantRows) {
			t.Errorf("messages written by Go: got %q; want %q", rows, wantRows)
		}
		for _, q := range []string{
			"SELECT created_at FROM messages WHERE id > 10",
			"SELECT created_at FROM wakeup_events WHERE message_id > 10",
			"SELECT acknowledged_at FROM wakeup_events WHERE context_id = 'ctx-carol' AND message_id <= 10",
			"SELECT acknowledged_at FROM wakeup_events WHERE context_id = 'ctx-alice' AND message_id = 11",
			"SELECT joined_at FROM group_members",
		} {
			values := interopStrings(t, groupPath, q)
			if len(values) == 0 {
				t.Errorf("%s: got no rows; want some", q)
			}
			for _, v := range values {
				if !timestampPattern.MatchString(v) {
					t.Errorf("%s: got %q; want the original's timestamp format", q, v)
				}
			}
		}
		if got := interopStrings(t, groupPath, "SELECT context_id || ':' || message_id FROM member_unread_messages ORDER BY context_id, message_id"); !reflect.DeepEqual(got,
			[]string{"ctx-bob:12", "ctx-carol:11", "ctx-carol:12"}) {
			t.Errorf("member_unread_messages: got %v; want bob 12, Carol 11 and 12", got)
		}
		if got := interopStrings(t, groupPath, "SELECT context_id || ':' || unread_count || ':' || latest_message_id FROM group_members ORDER BY context_id"); !reflect.DeepEqual(got,
			[]string{"ctx-alice:0:12", "ctx-bob:1:11", "ctx-carol:2:10"}) {
			t.Errorf("group_members counters: got %v; want unread counts matching member_unread_messages", got)
		}
		if got := interopStrings(t, groupPath, "SELECT context_id || ':' || relevance || ':' || priority || ':' || (acknowledged_at IS NULL) FROM wakeup_events WHERE message_id > 10 ORDER BY id"); !reflect.DeepEqual(got,
			[]string{"ctx-alice:mentioned:normal:0", "ctx-carol:mentioned:normal:1", "ctx-bob:fallback:normal:1", "ctx-carol:fallback:normal:1"}) {
			t.Errorf("wake events written by Go: got %v", got)
		}
		if got := interopStrings(t, groupPath, "SELECT count(*) FROM wakeup_events WHERE context_id = 'ctx-carol' AND message_id <= 10 AND acknowledged_at IS NULL"); !reflect.DeepEqual(got, []string{"0"}) {
			t.Errorf("Carol's unacknowledged old wake events: got %v; want 0 after get_unread_messages", got)
		}
		if got := interopStrings(t, groupPath, "SELECT metric || ':' || value || ':' || count FROM group_message_metrics ORDER BY metric, value"); !reflect.DeepEqual(got,
			[]string{"priority:high:1", "priority:normal:10", "priority:urgent:1", "routing:explicit:1", "routing:fallback:6", "routing:mentioned:4", "routing:urgent:1"}) {
			t.Errorf("group_message_metrics: got %v", got)
		}
		if got := interopString(t, groupPath, "SELECT message_revision FROM group_state"); got != "12" {
			t.Errorf("message_revision: got %s; want 12 (10 from Python, 2 sends)", got)
		}
	})

	t.Run("catalog keeps the original format", func(t *testing.T) {
		if got := interopString(t, catalogPath, "PRAGMA integrity_check"); got != "ok" {
			t.Errorf("catalog integrity_check: got %q; want ok", got)
		}
		if got := interopSchema(t, catalogPath); !reflect.DeepEqual(got, catalogSchema) {
			t.Errorf("catalog schema changed:\n got  %v\n want %v", got, catalogSchema)
		}
		var after [4]string
		interopQueryRow(t, catalogPath, "SELECT name, description, created_at, updated_at FROM groups WHERE group_id = ?",
			[]any{interopGroup}, &after[0], &after[1], &after[2], &after[3])
		if after != catalog {
			t.Errorf("catalog row: got %q; want unchanged %q", after, catalog)
		}
	})
}

// interopClient issues requests through a golden session and decodes answers.
type interopClient struct {
	t *testing.T
	s *goldenSession
	n int
}

func (c *interopClient) rpc(method string, params any) map[string]any {
	c.t.Helper()
	c.n++
	line, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.n, "method": method, "params": params})
	if err != nil {
		c.t.Fatal(err)
	}
	responses, raw, err := c.s.exchange(string(line))
	if err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	if len(responses) != 1 {
		c.t.Fatalf("%s: got %d answers %v; want 1", method, len(responses), raw)
	}
	m, _ := responses[0].(map[string]any)
	result, ok := m["result"].(map[string]any)
	if !ok {
		c.t.Fatalf("%s: got %s; want a result", method, raw[0])
	}
	return result
}

// call runs a tool and returns its decoded text; a tool error is fatal.
func (c *interopClient) call(tool string, args map[string]any) map[string]any {
	c.t.Helper()
	a := map[string]any{"caller_name": "interop"}
	for k, v := range args {
		a[k] = v
	}
	result := c.rpc("tools/call", map[string]any{"name": tool, "arguments": a})
	text := goldenToolText(result)
	v, err := decodeGolden([]byte(text))
	if err != nil {
		c.t.Fatalf("%s: text %q: %v", tool, text, err)
	}
	body, _ := v.(map[string]any)
	if result["isError"] != false {
		c.t.Fatalf("%s %v: got error %s; want success", tool, args, text)
	}
	return body
}

func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// interopIDs lists the ids of a messages answer.
func interopIDs(body map[string]any) []int {
	var ids []int
	msgs, _ := body["messages"].([]any)
	for _, m := range msgs {
		var id int
		fmt.Sscan(string(m.(map[string]any)["id"].(json.Number)), &id)
		ids = append(ids, id)
	}
	return ids
}

// interopOpen opens a database file read-write with plain SQL.
func interopOpen(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func interopStrings(t *testing.T, path, query string) []string {
	t.Helper()
	rows, err := interopOpen(t, path).Query(query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v sql.NullString
		if err := rows.Scan(&v); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		out = append(out, v.String)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}

func interopString(t *testing.T, path, query string) string {
	t.Helper()
	return strings.Join(interopStrings(t, path, query), "\n")
}

func interopQueryRow(t *testing.T, path, query string, args []any, dest ...any) {
	t.Helper()
	if err := interopOpen(t, path).QueryRow(query, args...).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// interopSchema lists every schema object with its SQL.
func interopSchema(t *testing.T, path string) []string {
	t.Helper()
	return interopStrings(t, path, "SELECT type || ' ' || name || ' ' || tbl_name || ' ' || coalesce(sql, '') FROM sqlite_master ORDER BY type, name")
}
