package main

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
)

// seedSearchGroup makes a group of count messages from "sender" through the
// store's own schema (so the FTS triggers index them), all unread by
// "reader". Messages whose id is a multiple of count/100 contain "needle-c",
// those whose id is a multiple of count/1000 contain "needle-m": 100 and
// 1,000 hits.
func seedSearchGroup(tb testing.TB, count int) (*store, string) {
	tb.Helper()
	st := newTestStore(tb, tb.TempDir())
	gid := newTestGroup(tb, st, "search", "sender", "reader")
	db := openTestDB(tb, st.groupPath(gid), "rw")
	tx, err := db.Begin()
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback()
	for _, q := range []string{
		`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
		 INSERT INTO messages(sender_context_id, sender_name, content, created_at)
		 SELECT 'sender', 'sender', 'Message ' || i || ': the migration of the store package is done; ' ||
		        CASE WHEN i % (?1 / 1000) = 0 THEN 'needle-m ' ELSE '' END ||
		        CASE WHEN i % (?1 / 100) = 0 THEN 'needle-c ' ELSE '' END ||
		        'two tests in the observer still fail on Windows paths.', '2026-01-01T00:00:00+00:00' FROM n`,
		`INSERT INTO member_unread_messages(context_id, message_id) SELECT 'reader', id FROM messages`,
		`UPDATE group_members SET unread_count = ?1 WHERE context_id = 'reader'`,
	} {
		if _, err := tx.Exec(q, count); err != nil {
			tb.Fatalf("%.60s: %v", q, err)
		}
	}
	if err := tx.Commit(); err != nil {
		tb.Fatal(err)
	}
	return st, gid
}

// BenchmarkSearchMessages searches 100,000 messages as a member who has
// read none of them, for terms with 100 and 1,000 hits. Search marks its
// hits read, so they are made unread again outside the timer.
//
//	go test -run '^$' -bench SearchMessages -benchtime=20x .
func BenchmarkSearchMessages(b *testing.B) {
	const count = 100000
	st, gid := seedSearchGroup(b, count)
	db := openTestDB(b, st.groupPath(gid), "rw")
	for _, tc := range []struct {
		term string
		hits int
	}{{"needle-c", 100}, {"needle-m", 1000}} {
		b.Run(fmt.Sprintf("%dhits", tc.hits), func(b *testing.B) {
			reset := func() {
				err := inTx(db, func(tx *sql.Tx) error {
					res, err := tx.Exec("INSERT OR IGNORE INTO member_unread_messages(context_id, message_id) SELECT 'reader', id FROM messages WHERE content LIKE ?", "%"+tc.term+"%")
					if err != nil {
						return err
					}
					n, _ := res.RowsAffected()
					_, err = tx.Exec("UPDATE group_members SET unread_count = unread_count + ? WHERE context_id = 'reader'", n)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			for range b.N {
				b.StopTimer()
				reset()
				b.StartTimer()
				got, err := st.searchMessages(context.Background(), gid, "reader", "reader", tc.term)
				if err != nil || len(got) != tc.hits {
					b.Fatalf("search %q: got %d messages (%v); want %d", tc.term, len(got), err, tc.hits)
				}
				b.StopTimer()
				var unread int
				if err := db.QueryRow("SELECT COUNT(*) FROM member_unread_messages WHERE context_id = 'reader'").Scan(&unread); err != nil || unread != count-tc.hits {
					b.Fatalf("unread after search: got %d (%v); want %d", unread, err, count-tc.hits)
				}
				b.StartTimer()
			}
		})
	}
}
