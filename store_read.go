package main

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// acknowledgedWakeupRetention is the original's: an acknowledged wake event
// is purged after it.
const acknowledgedWakeupRetention = 7 * 24 * time.Hour

// message is one stored message as the read tools return it.
type message struct {
	id            int64
	contextID     string
	name          string
	text          string
	priority      string
	mentions      []string
	wakeupTargets []string
	routingReason string
	sentAt        string
}

const messageColumns = "messages.id, sender_context_id, sender_name, content, created_at, priority, mentions, wakeup_targets, routing_reason"

// scanMessage reads one row of messageColumns, followed by extra columns.
func scanMessage(row rowScanner, extra ...any) (m message, err error) {
	var mentions, targets string
	err = row.Scan(append([]any{&m.id, &m.contextID, &m.name, &m.text, &m.sentAt, &m.priority, &mentions, &targets, &m.routingReason}, extra...)...)
	m.mentions, m.wakeupTargets = parseStringList(mentions), parseStringList(targets)
	return m, err
}

// readSelection is one way of choosing messages to return and mark read:
// rows selects them and predicate (over message_id) names the same set for
// marking, both taking args, as does exists, when set, a cheaper query than
// rows of whether the set is empty. allUnread says that set is all of the
// member's unread messages; via, when set, records them delivered that way.
type readSelection struct {
	rows      string
	predicate string
	exists    string
	args      []any
	allUnread bool
	via       string
}

// readMessages returns the selected messages and, when any were returned,
// marks them read and acknowledges their wake events for contextID, in one
// transaction so that concurrent senders cannot slip between read and mark.
// A request that ended meanwhile (requestEnded) rolls back: its answer
// would reach no one, so its mail stays unread.
func (s *store) readMessages(ctx context.Context, id, contextID, name string, pick func(latest int64) readSelection) ([]message, error) {
	// Nothing to return takes no write lock, nor does the original, which
	// reads first and locks only to mark: a huge send holds it for seconds.
	// A refusal is read there too; any other failure meets the write.
	var found bool
	err := s.withGroup(id, func(db *sql.DB) error {
		queryRow := func(q string, args ...any) rowScanner { return db.QueryRow(q, args...) }
		latest, err := requireMember(queryRow, contextID, name)
		if err == nil {
			sel := pick(latest)
			err = queryRow(cmp.Or(sel.exists, "SELECT EXISTS ("+sel.rows+")"), sel.args...).Scan(&found)
		}
		return err
	})
	if _, refused := errors.AsType[*domainError](err); refused || err == nil && !found {
		return nil, err
	}
	var out []message
	err = s.writeGroup(id, func(tx groupTx) error {
		latest, err := requireMember(tx.QueryRow, contextID, name)
		if err != nil {
			return err
		}
		sel := pick(latest)
		rows, err := tx.Query(sel.rows, sel.args...)
		if out, err = collectRows(rows, err, func(row rowScanner) (message, error) { return scanMessage(row) }); err != nil || len(out) == 0 {
			return err
		}
		if sel.via != "" {
			if err := s.recordDeliveries(tx, contextID, sel.via, mapSlice(out, func(m message) int64 { return m.id })); err != nil {
				return err
			}
		}
		if requestEnded(ctx) {
			return context.Cause(ctx)
		}
		return s.markRead(tx, contextID, sel.predicate, sel.args, sel.allUnread)
	})
	return out, err
}

// markRead marks the messages predicate selects read for the member: wake
// events acknowledged (first, as the predicate may read
// member_unread_messages), unread rows removed (all when allUnread) with
// unread_count in step, and the member revision bumped.
func (s *store) markRead(tx groupTx, contextID, predicate string, args []any, allUnread bool) error {
	if err := s.acknowledgeWakeups(tx, contextID, predicate, args); err != nil {
		return err
	}
	q := "DELETE FROM member_unread_messages WHERE context_id = ?"
	if allUnread {
		args = nil
	} else {
		q += " AND " + predicate
	}
	res, err := tx.Exec(q, append([]any{contextID}, args...)...)
	if err != nil {
		return err
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		return nil
	}
	if _, err := tx.Exec("UPDATE group_members SET unread_count = MAX(0, unread_count - ?) WHERE context_id = ?", n, contextID); err != nil {
		return err
	}
	return bumpRevisions(tx, "member_revision")
}

// acknowledgeWakeups marks the member's pending wake events for the selected
// messages acknowledged, purges events acknowledged over 7 days ago, and
// bumps the wakeup revision when either changed anything.
func (s *store) acknowledgeWakeups(tx groupTx, contextID, predicate string, args []any) error {
	q := "UPDATE wakeup_events SET acknowledged_at = ? WHERE context_id = ? AND " + predicate + " AND acknowledged_at IS NULL"
	res, err := tx.Exec(q, append([]any{s.timestamp(), contextID}, args...)...)
	if err != nil {
		return err
	}
	acked, _ := res.RowsAffected()
	if acked > 0 {
		s.acks.Add(1)
	}
	cutoff := formatTimestamp(s.now().Add(-acknowledgedWakeupRetention))
	res, err = tx.Exec("DELETE FROM wakeup_events WHERE acknowledged_at IS NOT NULL AND acknowledged_at < ?", cutoff)
	if err != nil {
		return err
	}
	if expired, _ := res.RowsAffected(); acked == 0 && expired == 0 {
		return nil
	}
	return bumpRevisions(tx, "wakeup_revision")
}

// messagesAfter returns every message with an id above after and marks them
// read (get_all_messages with after 0, get_messages_after).
func (s *store) messagesAfter(ctx context.Context, id, contextID, name string, after int64) ([]message, error) {
	return s.readMessages(ctx, id, contextID, name, func(int64) readSelection { return afterCursor(after) })
}

// latestMessages returns the messages after the member's own latest send.
func (s *store) latestMessages(ctx context.Context, id, contextID, name string) ([]message, error) {
	return s.readMessages(ctx, id, contextID, name, afterCursor)
}

// afterCursor selects the messages with an id above after.
func afterCursor(after int64) readSelection {
	return readSelection{
		rows:      "SELECT " + messageColumns + " FROM messages WHERE id > ? ORDER BY id ASC",
		predicate: "message_id > ?",
		args:      []any{after},
	}
}

// unreadMessages returns the member's unread messages and, when via is set
// (wait_for_messages), records them delivered that way.
func (s *store) unreadMessages(ctx context.Context, id, contextID, name, via string) ([]message, error) {
	return s.readMessages(ctx, id, contextID, name, func(int64) readSelection {
		return readSelection{
			rows: "SELECT " + messageColumns + " FROM member_unread_messages JOIN messages ON messages.id = member_unread_messages.message_id " +
				"WHERE member_unread_messages.context_id = ? ORDER BY messages.id ASC",
			predicate: "message_id IN (SELECT message_id FROM member_unread_messages WHERE context_id = ?)",
			args:      []any{contextID},
			allUnread: true,
			via:       via,
		}
	})
}

// shownName selects name column col cut at 1,024 characters: views repeat
// names on every row, and nothing bounds one.
func shownName(col string) string { return shownText(col, 1024) }

// shownText selects text column col cut at n characters. substr stops at a
// NUL and would hide the rest, so a text holding one is cut at 4n bytes.
func shownText(col string, n int) string {
	return fmt.Sprintf("IIF(instr(%[1]s, char(0)), CAST(substr(CAST(%[1]s AS BLOB), 1, %[2]d) AS TEXT), substr(%[1]s, 1, %[3]d))", col, 4*n, n)
}

// rowFound reports whether the QueryRow Scan that returned err found its
// row; sql.ErrNoRows is no error to it.
func rowFound(err error) (bool, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// unreadCount reads how many unread messages the member has without a
// write transaction: a waiting tool checks it on every change of the group,
// and each write would wake every watcher of the directory. member is false
// when contextID has not joined.
func (s *store) unreadCount(id, contextID string) (n int64, member bool, err error) {
	err = s.withGroup(id, func(db *sql.DB) (err error) {
		member, err = rowFound(db.QueryRow("SELECT unread_count FROM group_members WHERE context_id = ?", contextID).Scan(&n))
		return err
	})
	return n, member, err
}

// searchMessages returns messages whose text matches the LIKE pattern
// %query% (ASCII case-insensitive; % and _ in query are wildcards) through
// the trigram index, or by a scan where a group lacks the index.
func (s *store) searchMessages(ctx context.Context, id, contextID, name, query string) ([]message, error) {
	var indexed bool
	if err := s.withGroup(id, func(db *sql.DB) error {
		return db.QueryRow("SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'message_search')").Scan(&indexed)
	}); err != nil {
		return nil, err
	}
	// The trigram index finds the hits both to list and to mark them (a
	// scan for the second was most of a search's time); SQLite still checks
	// LIKE on each candidate, so the set is exactly a scan's.
	hits := "SELECT id FROM messages WHERE content LIKE ? COLLATE NOCASE"
	if indexed {
		hits = "SELECT rowid FROM message_search WHERE content LIKE ? COLLATE NOCASE"
	}
	return s.readMessages(ctx, id, contextID, name, func(int64) readSelection {
		return readSelection{
			rows:      "SELECT " + messageColumns + " FROM messages WHERE id IN (" + hits + ") ORDER BY id ASC",
			predicate: "message_id IN (" + hits + ")",
			exists:    "SELECT EXISTS (" + hits + ")", // stops at the first hit; rows lists every one first
			args:      []any{"%" + query + "%"},
		}
	})
}

// membership is one group a context has joined, with what waits for it.
type membership struct {
	groupID   string
	groupName string
	name      string // the member's name in the group
	unread    int64
	wakeups   int64 // unacknowledged wake events
}

// membershipReaders bounds how many groups memberships reads at once. A
// hook runs after every tool call and reads every group in the directory,
// and opening a group's database is CPU and file-system calls: at 300
// groups a hook took p50 236–297 ms reading one group at a time and 141–187
// ms with 8 readers on 2 cores (BenchmarkHookNothingPending). A few more
// readers than cores keep the cores busy while one waits on the file system.
const membershipReaders = 8

// memberships lists every group in the store's directory that contextID has
// joined, sorted by group id, reading up to membershipReaders groups at
// once. Groups that vanish or are busy are skipped: a hook must answer
// quickly and the next one will see them.
func (s *store) memberships(contextID string) ([]membership, error) {
	ids := groupFiles(s.dir)
	found, errs := make([]membership, len(ids)), make([]error, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(membershipReaders, len(ids)) {
		wg.Go(func() {
			for i := range next {
				found[i], errs[i] = s.membershipIn(ids[i], contextID)
			}
		})
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := cmp.Or(errs...); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(found, func(m membership) bool { return m.groupID == "" }), nil
}

// membershipIn returns contextID's membership of group id, or none (no
// groupID) when it has not joined or the group cannot be read now.
func (s *store) membershipIn(id, contextID string) (membership, error) {
	m := membership{groupID: id}
	found := false
	err := s.withGroup(id, func(db *sql.DB) (err error) {
		found, err = rowFound(db.QueryRow("SELECT name, unread_count, "+
			"(SELECT COUNT(*) FROM wakeup_events WHERE context_id = ?1 AND acknowledged_at IS NULL), "+
			"COALESCE((SELECT name FROM group_metadata WHERE id = 1), '') "+
			"FROM group_members WHERE context_id = ?1", contextID).Scan(&m.name, &m.unread, &m.wakeups, &m.groupName))
		return err
	})
	if _, refused := errors.AsType[*domainError](err); refused || isBusy(err) {
		return membership{}, nil
	}
	if err != nil {
		// A file no server can use must not silence every member's hooks.
		path := s.groupPath(id)
		if problem := checkGroupFile(path); problem != nil {
			s.damaged.warn(path, problem)
			return membership{}, nil
		}
		return membership{}, err
	}
	if !found {
		return membership{}, nil
	}
	return m, nil
}

// pendingMessage is one unread message of a member, with its wake event
// when it has an unacknowledged one.
type pendingMessage struct {
	groupID   string
	groupName string
	msg       message
	wakes     bool   // an unacknowledged wake event exists
	relevance string // the wake event's relevance when wakes
}

// pendingMail returns a member's unread messages in one group but those
// already delivered to it (cut short, say; get_unread_messages has them):
// how many in all, and the first limit in the order a hook walks them (with
// a pending wake event first, each kind oldest first), so that a hook reads
// a page of a long history joined, not all of it at every tool call.
func (s *store) pendingMail(g membership, contextID string, limit int) (out []pendingMessage, total int, err error) {
	err = s.withGroup(g.groupID, func(db *sql.DB) error {
		from := " FROM member_unread_messages u JOIN messages m ON m.id = u.message_id " +
			"LEFT JOIN wakeup_events w ON w.message_id = u.message_id AND w.context_id = u.context_id AND w.acknowledged_at IS NULL " +
			"WHERE u.context_id = ?"
		tables, err := tableNames(context.Background(), db)
		if err != nil {
			return err
		}
		if tables["wakeup_deliveries"] {
			from += " AND NOT EXISTS (SELECT 1 FROM wakeup_deliveries d WHERE d.message_id = u.message_id AND d.context_id = u.context_id)"
		}
		if err := db.QueryRow("SELECT COUNT(*)"+from, contextID).Scan(&total); err != nil {
			return err
		}
		out, err = queryAll(context.Background(), db, func(row rowScanner) (pendingMessage, error) {
			var relevance sql.NullString
			msg, err := scanMessage(row, &relevance)
			return pendingMessage{groupID: g.groupID, groupName: g.groupName, msg: msg, wakes: relevance.Valid, relevance: relevance.String}, err
		}, "SELECT m.id, m.sender_context_id, m.sender_name, m.content, m.created_at, m.priority, m.mentions, m.wakeup_targets, m.routing_reason, w.relevance"+
			from+" ORDER BY w.relevance IS NULL, m.created_at, m.id LIMIT ?", contextID, limit)
		return err
	})
	return out, total, err
}

// parseStringList reads a stored JSON list, keeping only its strings, as the
// original does for the mentions and wakeup_targets columns.
func parseStringList(s string) []string {
	var items []any
	if json.Unmarshal([]byte(s), &items) != nil {
		return []string{}
	}
	out := []string{}
	for _, it := range items {
		if v, ok := it.(string); ok {
			out = append(out, v)
		}
	}
	return out
}

// groupSnapshot is the body of a group resource read.
func (s *store) groupSnapshot(id string) (count int64, latest *int64, err error) {
	err = s.withGroup(id, func(db *sql.DB) error {
		return db.QueryRow("SELECT COUNT(*), MAX(id) FROM messages").Scan(&count, &latest)
	})
	return count, latest, err
}
