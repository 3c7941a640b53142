package main

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// observeFixture builds groups directories the way the MCP server writes
// them (the original's schema), so dashboard tests need no Python.
type observeFixture struct {
	t   testing.TB
	dir string
}

// fixtureGroupSchema is the original's group database schema (mcp.py
// _initialize_group), without the FTS index the dashboard never reads.
const fixtureGroupSchema = `
PRAGMA journal_mode=WAL;
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, sender_context_id TEXT NOT NULL, sender_name TEXT NOT NULL,
  content TEXT NOT NULL, created_at TEXT NOT NULL, priority TEXT NOT NULL DEFAULT 'normal', mentions TEXT NOT NULL DEFAULT '[]',
  wakeup_targets TEXT NOT NULL DEFAULT '[]', routing_reason TEXT NOT NULL DEFAULT 'fallback');
CREATE INDEX messages_by_sender_and_id ON messages(sender_context_id, id);
CREATE TABLE group_message_metrics (metric TEXT NOT NULL, value TEXT NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (metric, value));
CREATE TABLE group_metadata (id INTEGER PRIMARY KEY CHECK (id = 1), name TEXT NOT NULL DEFAULT '', description TEXT NOT NULL DEFAULT '',
  creator_context_id TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE group_members (context_id TEXT PRIMARY KEY, name TEXT NOT NULL, joined_at TEXT NOT NULL, latest_message_id INTEGER,
  unread_count INTEGER NOT NULL DEFAULT 0);
CREATE TABLE member_unread_messages (context_id TEXT NOT NULL, message_id INTEGER NOT NULL, PRIMARY KEY (context_id, message_id));
CREATE INDEX member_unread_messages_by_message ON member_unread_messages(message_id);
CREATE TABLE wakeup_events (id INTEGER PRIMARY KEY AUTOINCREMENT, message_id INTEGER NOT NULL, context_id TEXT NOT NULL,
  relevance TEXT NOT NULL, priority TEXT NOT NULL DEFAULT 'normal', created_at TEXT NOT NULL, acknowledged_at TEXT,
  last_notified_at TEXT, UNIQUE(message_id, context_id));
CREATE INDEX wakeup_events_by_context ON wakeup_events(context_id, id);
CREATE TABLE group_state (id INTEGER PRIMARY KEY CHECK (id = 1), message_revision INTEGER NOT NULL DEFAULT 0,
  member_revision INTEGER NOT NULL DEFAULT 0, wakeup_revision INTEGER NOT NULL DEFAULT 0, metadata_revision INTEGER NOT NULL DEFAULT 0);
INSERT INTO group_state(id) VALUES (1);
PRAGMA user_version = 1;
`

// catalogSchema is the group catalog every writer keeps in observability.sqlite3.
const catalogSchema = `
PRAGMA journal_mode=WAL;
CREATE TABLE IF NOT EXISTS groups (group_id TEXT PRIMARY KEY, name TEXT NOT NULL, description TEXT NOT NULL, created_at TEXT, updated_at TEXT NOT NULL);
`

// auditSchemaV2 is the original's audit schema version 2 (ObservabilityStore).
func auditSchemaV2() string {
	dims := "tool_name TEXT NOT NULL DEFAULT '', group_id TEXT NOT NULL DEFAULT '', context_id TEXT NOT NULL DEFAULT '', " +
		"name TEXT NOT NULL DEFAULT '', outcome TEXT NOT NULL DEFAULT '', error_category TEXT NOT NULL DEFAULT ''"
	key := "bucket_start, tool_name, group_id, context_id, name, outcome, error_category"
	var b strings.Builder
	b.WriteString(`
CREATE TABLE metadata (id INTEGER PRIMARY KEY CHECK (id = 1), schema_version INTEGER NOT NULL, created_at TEXT NOT NULL,
  audit_enabled_at TEXT NOT NULL, last_retention_cleanup_at TEXT, retention_setting TEXT);
CREATE TABLE tool_calls (id INTEGER PRIMARY KEY, occurred_at TEXT NOT NULL, audit_request_id TEXT, tool_name TEXT NOT NULL,
  group_id TEXT, context_id TEXT, name TEXT, outcome TEXT NOT NULL, duration_ms INTEGER NOT NULL, result_count INTEGER,
  error_category TEXT, details_json TEXT);
CREATE INDEX tool_calls_by_occurred_at ON tool_calls(occurred_at);
CREATE INDEX tool_calls_by_outcome_and_occurred_at ON tool_calls(outcome, occurred_at);
CREATE TABLE tool_call_group_names (tool_call_id INTEGER PRIMARY KEY, group_name TEXT NOT NULL);
CREATE TABLE analytics_filter_values (field TEXT NOT NULL, value TEXT NOT NULL, label TEXT NOT NULL, count INTEGER NOT NULL, PRIMARY KEY(field, value));
`)
	for _, t := range auditResolutions {
		fmt.Fprintf(&b, "CREATE TABLE analytics_%s (bucket_start INTEGER NOT NULL, %s, call_count INTEGER NOT NULL, error_count INTEGER NOT NULL, duration_sum_ms INTEGER NOT NULL, PRIMARY KEY (%s));\n", t.suffix, dims, key)
		fmt.Fprintf(&b, "CREATE TABLE analytics_latency_%s (bucket_start INTEGER NOT NULL, %s, latency_bucket TEXT NOT NULL, sample_count INTEGER NOT NULL, PRIMARY KEY (%s, latency_bucket));\n", t.suffix, dims, key)
	}
	b.WriteString("PRAGMA user_version = 2;\n")
	return b.String()
}

func newObserveFixture(t testing.TB) *observeFixture {
	return &observeFixture{t: t, dir: filepath.Join(t.TempDir(), "groups")}
}

// exec runs statements on a read-write connection to one database file.
func (f *observeFixture) exec(file string, fn func(tx *sql.Tx) error) {
	f.t.Helper()
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(2000)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+filepath.Join(f.dir, file)+"?"+q.Encode())
	if err != nil {
		f.t.Fatalf("open %s: %v", file, err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		f.t.Fatalf("begin %s: %v", file, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		f.t.Fatalf("write %s: %v", file, err)
	}
	if err := tx.Commit(); err != nil {
		f.t.Fatalf("commit %s: %v", file, err)
	}
}

// script runs a multi-statement script outside a transaction (PRAGMAs).
func (f *observeFixture) script(file, script string) {
	f.t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(f.dir, file))
	if err != nil {
		f.t.Fatalf("open %s: %v", file, err)
	}
	defer db.Close()
	if _, err := db.Exec(script); err != nil {
		f.t.Fatalf("script on %s: %v", file, err)
	}
}

func (f *observeFixture) mkdir() {
	f.t.Helper()
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
}

// fixtureMember is a group member to create.
type fixtureMember struct{ ContextID, Name string }

// group creates a group with members and records it in the catalog.
func (f *observeFixture) group(name, description string, at time.Time, members ...fixtureMember) string {
	f.t.Helper()
	f.mkdir()
	raw := make([]byte, 16)
	rand.Read(raw)
	id := "grp_" + hex.EncodeToString(raw)
	file := id + ".sqlite3"
	f.script(file, fixtureGroupSchema)
	ts := formatTimestamp(at)
	creator := "creator"
	if len(members) > 0 {
		creator = members[0].ContextID
	}
	f.exec(file, func(tx *sql.Tx) error {
		if _, err := tx.Exec("INSERT INTO group_metadata(id, name, description, creator_context_id, created_at, updated_at) VALUES (1, ?, ?, ?, ?, ?)", name, description, creator, ts, ts); err != nil {
			return err
		}
		for _, m := range members {
			if _, err := tx.Exec("INSERT INTO group_members(context_id, name, joined_at) VALUES (?, ?, ?)", m.ContextID, m.Name, ts); err != nil {
				return err
			}
		}
		_, err := tx.Exec("UPDATE group_state SET member_revision = member_revision + 1, metadata_revision = metadata_revision + 1")
		return err
	})
	f.script(catalogFileName, catalogSchema)
	f.exec(catalogFileName, func(tx *sql.Tx) error {
		_, err := tx.Exec("INSERT INTO groups(group_id, name, description, created_at, updated_at) VALUES (?, ?, ?, ?, ?)", id, name, description, ts, ts)
		return err
	})
	return id
}

// fixtureMessage is one message to insert.
type fixtureMessage struct {
	Sender, SenderName, Content, Priority string
	At                                    time.Time
}

// messages inserts messages in one transaction, marking them unread for
// every other member and bumping the revisions the way writers do.
func (f *observeFixture) messages(id string, msgs ...fixtureMessage) []int64 {
	f.t.Helper()
	var ids []int64
	f.exec(id+".sqlite3", func(tx *sql.Tx) error {
		for _, m := range msgs {
			prio := firstNonEmpty(m.Priority, "normal")
			res, err := tx.Exec("INSERT INTO messages(sender_context_id, sender_name, content, created_at, priority, routing_reason) VALUES (?, ?, ?, ?, ?, 'fallback')",
				m.Sender, m.SenderName, m.Content, formatTimestamp(m.At), prio)
			if err != nil {
				return err
			}
			mid, _ := res.LastInsertId()
			ids = append(ids, mid)
			if _, err := tx.Exec("INSERT INTO member_unread_messages(context_id, message_id) SELECT context_id, ? FROM group_members WHERE context_id != ?", mid, m.Sender); err != nil {
				return err
			}
			if _, err := tx.Exec("UPDATE group_members SET unread_count = unread_count + 1 WHERE context_id != ?", m.Sender); err != nil {
				return err
			}
			for _, metric := range [][2]string{{"priority", prio}, {"routing", "fallback"}} {
				if _, err := tx.Exec("INSERT INTO group_message_metrics(metric, value, count) VALUES (?, ?, 1) ON CONFLICT(metric, value) DO UPDATE SET count = count + 1", metric[0], metric[1]); err != nil {
					return err
				}
			}
		}
		_, err := tx.Exec("UPDATE group_state SET message_revision = message_revision + 1, member_revision = member_revision + 1")
		return err
	})
	return ids
}

// wakeup records a wake event, acknowledged when acked is not zero.
func (f *observeFixture) wakeup(id string, messageID int64, contextID string, at, acked time.Time) {
	f.t.Helper()
	f.exec(id+".sqlite3", func(tx *sql.Tx) error {
		var ack any
		if !acked.IsZero() {
			ack = formatTimestamp(acked)
		}
		if _, err := tx.Exec("INSERT INTO wakeup_events(message_id, context_id, relevance, priority, created_at, acknowledged_at, last_notified_at) VALUES (?, ?, 'mention', 'high', ?, ?, ?)",
			messageID, contextID, formatTimestamp(at), ack, formatTimestamp(at)); err != nil {
			return err
		}
		_, err := tx.Exec("UPDATE group_state SET wakeup_revision = wakeup_revision + 1")
		return err
	})
}

// enableAudit creates a version-2 audit schema next to the catalog.
func (f *observeFixture) enableAudit(at time.Time) {
	f.t.Helper()
	f.mkdir()
	f.script(catalogFileName, "PRAGMA auto_vacuum=INCREMENTAL;"+catalogSchema+auditSchemaV2())
	f.exec(catalogFileName, func(tx *sql.Tx) error {
		ts := formatTimestamp(at)
		_, err := tx.Exec("INSERT INTO metadata(id, schema_version, created_at, audit_enabled_at, last_retention_cleanup_at, retention_setting) VALUES (1, 2, ?, ?, NULL, 'inf')", ts, ts)
		return err
	})
}

// fixtureCall is one audited tool call.
type fixtureCall struct {
	At                       time.Time
	Tool, Group, GroupName   string
	Context, Caller, Outcome string
	Category                 string
	Duration                 int64
}

// calls records audit rows with their rollups and filter values, as the
// writer does, in one transaction.
func (f *observeFixture) calls(calls ...fixtureCall) {
	f.t.Helper()
	f.exec(catalogFileName, func(tx *sql.Tx) error {
		for _, c := range calls {
			outcome := firstNonEmpty(c.Outcome, "success")
			res, err := tx.Exec("INSERT INTO tool_calls(occurred_at, audit_request_id, tool_name, group_id, context_id, name, outcome, duration_ms, error_category) VALUES (?, '1', ?, NULLIF(?, ''), NULLIF(?, ''), NULLIF(?, ''), ?, ?, NULLIF(?, ''))",
				formatTimestamp(c.At), c.Tool, c.Group, c.Context, c.Caller, outcome, c.Duration, c.Category)
			if err != nil {
				return err
			}
			rowID, _ := res.LastInsertId()
			if c.GroupName != "" {
				if _, err := tx.Exec("INSERT INTO tool_call_group_names(tool_call_id, group_name) VALUES (?, ?)", rowID, c.GroupName); err != nil {
					return err
				}
			}
			errs := 0
			if outcome == "error" {
				errs = 1
			}
			for _, tier := range auditResolutions {
				bucket := c.At.Unix() / tier.seconds * tier.seconds
				dims := []any{bucket, c.Tool, c.Group, c.Context, c.Caller, outcome, c.Category}
				if _, err := tx.Exec("INSERT INTO analytics_"+tier.suffix+"(bucket_start, tool_name, group_id, context_id, name, outcome, error_category, call_count, error_count, duration_sum_ms) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?) "+
					"ON CONFLICT(bucket_start, tool_name, group_id, context_id, name, outcome, error_category) DO UPDATE SET call_count = call_count + 1, error_count = error_count + excluded.error_count, duration_sum_ms = duration_sum_ms + excluded.duration_sum_ms",
					append(dims, errs, c.Duration)...); err != nil {
					return err
				}
				if _, err := tx.Exec("INSERT INTO analytics_latency_"+tier.suffix+"(bucket_start, tool_name, group_id, context_id, name, outcome, error_category, latency_bucket, sample_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1) "+
					"ON CONFLICT(bucket_start, tool_name, group_id, context_id, name, outcome, error_category, latency_bucket) DO UPDATE SET sample_count = sample_count + 1",
					append(dims, auditLatencyBucket(c.Duration))...); err != nil {
					return err
				}
			}
			for _, fv := range [][3]string{{"tool_name", c.Tool, c.Tool}, {"name", c.Caller, c.Caller}, {"group_id", c.Group, firstNonEmpty(c.GroupName, c.Group)}} {
				if fv[1] == "" {
					continue
				}
				if _, err := tx.Exec("INSERT INTO analytics_filter_values(field, value, label, count) VALUES (?, ?, ?, 1) ON CONFLICT(field, value) DO UPDATE SET count = count + 1, label = excluded.label", fv[0], fv[1], fv[2]); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
