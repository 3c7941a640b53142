package main

import (
	"database/sql"
	"errors"
	"time"
)

// The original's wakeup timings: an unacknowledged wake event is notified
// again after wakeupReminderInterval, and an acknowledged one is purged
// after acknowledgedWakeupRetention.
const (
	wakeupReminderInterval      = 300 * time.Second
	acknowledgedWakeupRetention = 7 * 24 * time.Hour
)

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

func scanMessages(rows *sql.Rows) ([]message, error) {
	defer rows.Close()
	var out []message
	for rows.Next() {
		var m message
		var mentions, targets string
		if err := rows.Scan(&m.id, &m.contextID, &m.name, &m.text, &m.sentAt, &m.priority, &mentions, &targets, &m.routingReason); err != nil {
			return nil, err
		}
		m.mentions, m.wakeupTargets = parseStringList(mentions), parseStringList(targets)
		out = append(out, m)
	}
	return out, rows.Err()
}

// readSelection is one way of choosing messages to return and mark read:
// rows selects them, and predicate (over member_unread_messages.message_id
// and wakeup_events.message_id) names the same set for marking. allUnread
// says that set is all of the member's unread messages, whose unread rows
// are then removed without the predicate. via, when set, records the
// returned messages delivered that way in wakeup_deliveries.
type readSelection struct {
	rows      string
	rowArgs   []any
	predicate string
	predArgs  []any
	allUnread bool
	via       string
}

// readMessages returns the selected messages and, when any were returned,
// marks them read and acknowledges their wake events for contextID, in one
// transaction so that concurrent senders cannot slip between read and mark.
func (s *store) readMessages(id, contextID, name string, pick func(tx groupTx, latest int64) (readSelection, error)) ([]message, error) {
	var out []message
	err := s.writeGroup(id, func(tx groupTx) error {
		latest, err := requireMember(tx, contextID, name)
		if err != nil {
			return err
		}
		sel, err := pick(tx, latest)
		if err != nil {
			return err
		}
		rows, err := tx.Query(sel.rows, sel.rowArgs...)
		if err != nil {
			return err
		}
		if out, err = scanMessages(rows); err != nil || len(out) == 0 {
			return err
		}
		if sel.via != "" {
			ids := make([]int64, len(out))
			for i, m := range out {
				ids[i] = m.id
			}
			if err := s.recordDeliveries(tx, contextID, sel.via, ids); err != nil {
				return err
			}
		}
		return s.markRead(tx, contextID, sel.predicate, sel.predArgs, sel.allUnread)
	})
	return out, err
}

// markRead is how a read or a delivery marks the messages predicate selects
// for the member: their wake events acknowledged, their unread rows removed
// (all of the member's unread rows when allUnread), and the member and
// wakeup revisions bumped for whichever of the two changed. Wake events go
// first, as the predicate may read member_unread_messages.
func (s *store) markRead(tx groupTx, contextID, predicate string, args []any, allUnread bool) error {
	ackChanged, err := s.acknowledgeWakeups(tx, contextID, predicate, args)
	if err != nil {
		return err
	}
	if allUnread {
		predicate, args = "", nil
	}
	unreadChanged, err := removeUnread(tx, contextID, predicate, args)
	if err != nil {
		return err
	}
	var which revision
	if unreadChanged {
		which |= revMember
	}
	if ackChanged {
		which |= revWakeup
	}
	return bumpRevisions(tx, which)
}

// removeUnread deletes the member's unread rows matching predicate, or all
// of them when it is empty, and keeps the member's unread_count in step.
func removeUnread(tx groupTx, contextID, predicate string, args []any) (bool, error) {
	q := "DELETE FROM member_unread_messages WHERE context_id = ?"
	if predicate != "" {
		q += " AND " + predicate
	}
	res, err := tx.Exec(q, append([]any{contextID}, args...)...)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		return false, nil
	}
	_, err = tx.Exec("UPDATE group_members SET unread_count = MAX(0, unread_count - ?) WHERE context_id = ?", n, contextID)
	return true, err
}

// acknowledgeWakeups marks the member's pending wake events for the selected
// messages acknowledged, and purges events acknowledged over 7 days ago.
func (s *store) acknowledgeWakeups(tx groupTx, contextID, predicate string, args []any) (bool, error) {
	q := "UPDATE wakeup_events SET acknowledged_at = ? WHERE context_id = ? AND " + predicate + " AND acknowledged_at IS NULL"
	res, err := tx.Exec(q, append([]any{s.timestamp(), contextID}, args...)...)
	if err != nil {
		return false, err
	}
	acked, _ := res.RowsAffected()
	if acked > 0 {
		s.acks.Add(1)
	}
	cutoff := formatTimestamp(s.now().Add(-acknowledgedWakeupRetention))
	res, err = tx.Exec("DELETE FROM wakeup_events WHERE acknowledged_at IS NOT NULL AND acknowledged_at < ?", cutoff)
	if err != nil {
		return false, err
	}
	expired, _ := res.RowsAffected()
	return acked > 0 || expired > 0, nil
}

// messagesAfter returns every message with an id above after and marks them
// read (get_all_messages with after 0, get_messages_after).
func (s *store) messagesAfter(id, contextID, name string, after int64) ([]message, error) {
	return s.readMessages(id, contextID, name, func(groupTx, int64) (readSelection, error) {
		return afterCursor(after), nil
	})
}

// latestMessages returns the messages after the member's own latest send.
func (s *store) latestMessages(id, contextID, name string) ([]message, error) {
	return s.readMessages(id, contextID, name, func(_ groupTx, latest int64) (readSelection, error) {
		return afterCursor(latest), nil
	})
}

// afterCursor selects the messages with an id above after.
func afterCursor(after int64) readSelection {
	return readSelection{
		rows:      "SELECT " + messageColumns + " FROM messages WHERE id > ? ORDER BY id ASC",
		rowArgs:   []any{after},
		predicate: "message_id > ?",
		predArgs:  []any{after},
	}
}

// unreadMessages returns the member's unread messages.
func (s *store) unreadMessages(id, contextID, name string) ([]message, error) {
	return s.unreadMessagesVia(id, contextID, name, "")
}

// unreadMessagesVia is unreadMessages that also records what it returns as
// delivered by via (wait_for_messages), for the delivery states.
func (s *store) unreadMessagesVia(id, contextID, name, via string) ([]message, error) {
	return s.readMessages(id, contextID, name, func(groupTx, int64) (readSelection, error) {
		return readSelection{
			rows: "SELECT " + messageColumns + " FROM member_unread_messages JOIN messages ON messages.id = member_unread_messages.message_id " +
				"WHERE member_unread_messages.context_id = ? ORDER BY messages.id ASC",
			rowArgs:   []any{contextID},
			predicate: "message_id IN (SELECT message_id FROM member_unread_messages WHERE context_id = ?)",
			predArgs:  []any{contextID},
			allUnread: true,
			via:       via,
		}, nil
	})
}

// unreadCount reads how many unread messages the member has, without the
// write transaction a read-and-mark takes: a waiting tool checks this on
// every change of the group, and each write would wake every watcher of
// the directory. member is false when contextID has not joined.
func (s *store) unreadCount(id, contextID string) (n int64, member bool, err error) {
	err = s.withGroup(id, func(db *sql.DB) error {
		err := db.QueryRow("SELECT unread_count FROM group_members WHERE context_id = ?", contextID).Scan(&n)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		member = err == nil
		return err
	})
	return n, member, err
}

// searchMessages returns messages whose text matches the LIKE pattern
// %query% (ASCII case-insensitive; % and _ in query are wildcards) through
// the trigram index, or by a scan where a group lacks the index.
func (s *store) searchMessages(id, contextID, name, query string) ([]message, error) {
	pattern := "%" + query + "%"
	return s.readMessages(id, contextID, name, func(tx groupTx, _ int64) (readSelection, error) {
		var indexed bool
		err := tx.QueryRow("SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'message_search')").Scan(&indexed)
		if err != nil {
			return readSelection{}, err
		}
		// The hits are found through the trigram index when the group has
		// one, both to list them and to mark them read: scanning every
		// message for the second was most of a search's time. SQLite still
		// checks LIKE on each candidate the index returns, so both sets are
		// exactly what a scan finds.
		hits := "SELECT id FROM messages WHERE content LIKE ? COLLATE NOCASE"
		if indexed {
			hits = "SELECT rowid FROM message_search WHERE content LIKE ? COLLATE NOCASE"
		}
		return readSelection{
			rows:      "SELECT " + messageColumns + " FROM messages WHERE id IN (" + hits + ") ORDER BY id ASC",
			rowArgs:   []any{pattern},
			predicate: "message_id IN (" + hits + ")",
			predArgs:  []any{pattern},
		}, nil
	})
}

// groupSnapshot is the body of a group resource read.
func (s *store) groupSnapshot(id string) (count int64, latest *int64, err error) {
	err = s.withGroup(id, func(db *sql.DB) error {
		return db.QueryRow("SELECT COUNT(*), MAX(id) FROM messages").Scan(&count, &latest)
	})
	return count, latest, err
}

// messageRevision reads the constant-size marker that subscription polling
// compares, so polling never scans messages.
func (s *store) messageRevision(id string) (int64, error) {
	var rev int64
	err := s.withGroup(id, func(db *sql.DB) error {
		err := db.QueryRow("SELECT message_revision FROM group_state WHERE id = 1").Scan(&rev)
		if errors.Is(err, sql.ErrNoRows) {
			return errors.New("group state marker is missing")
		}
		return err
	})
	return rev, err
}

// wakeup is one wake event of a member.
type wakeup struct {
	id             int64
	messageID      int64
	relevance      string
	priority       string
	createdAt      string
	acknowledgedAt *string
	lastNotifiedAt *string
}

// wakeups lists a member's wake events, oldest first.
func (s *store) wakeups(id, contextID string) ([]wakeup, error) {
	var out []wakeup
	err := s.withGroup(id, func(db *sql.DB) error {
		rows, err := db.Query("SELECT id, message_id, relevance, priority, created_at, acknowledged_at, last_notified_at FROM wakeup_events WHERE context_id = ? ORDER BY id ASC", contextID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var w wakeup
			if err := rows.Scan(&w.id, &w.messageID, &w.relevance, &w.priority, &w.createdAt, &w.acknowledgedAt, &w.lastNotifiedAt); err != nil {
				return err
			}
			out = append(out, w)
		}
		return rows.Err()
	})
	return out, err
}

// dueWakeup returns the oldest unacknowledged wake event of contextID that
// was never notified or last notified over 300 s ago, without marking it.
func (s *store) dueWakeup(id, contextID string) (*wakeup, error) {
	cutoff := formatTimestamp(s.now().Add(-wakeupReminderInterval))
	var w *wakeup
	err := s.withGroup(id, func(db *sql.DB) error {
		var row wakeup
		err := db.QueryRow("SELECT id, priority, relevance FROM wakeup_events WHERE context_id = ? AND acknowledged_at IS NULL "+
			"AND (last_notified_at IS NULL OR last_notified_at <= ?) ORDER BY id ASC LIMIT 1", contextID, cutoff).
			Scan(&row.id, &row.priority, &row.relevance)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err == nil {
			w = &row
		}
		return err
	})
	return w, err
}

// nextWakeupReminder returns when the earliest reminder of contextID's
// notified, unacknowledged wake events falls due, or the zero time when
// none is waiting for one. Only writes change it otherwise, so the poller
// can skip an unchanged group until then.
func (s *store) nextWakeupReminder(id, contextID string) (time.Time, error) {
	var last sql.NullString
	err := s.withGroup(id, func(db *sql.DB) error {
		return db.QueryRow("SELECT MIN(last_notified_at) FROM wakeup_events WHERE context_id = ? AND acknowledged_at IS NULL "+
			"AND last_notified_at IS NOT NULL", contextID).Scan(&last)
	})
	if err != nil || !last.Valid {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, last.String)
	if err != nil {
		// Unreadable: a reminder may be due at any time, so look every poll.
		return s.now(), nil
	}
	return t.Add(wakeupReminderInterval), nil
}

// markWakeupNotified records that a wake event's notification was written.
func (s *store) markWakeupNotified(id string, eventID int64) error {
	return s.writeGroup(id, func(tx groupTx) error {
		res, err := tx.Exec("UPDATE wakeup_events SET last_notified_at = ? WHERE id = ? AND acknowledged_at IS NULL", s.timestamp(), eventID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return bumpRevisions(tx, revWakeup)
		}
		return nil
	})
}

// sent is the result of send_message.
type sent struct {
	messageID     int64
	groupID       string
	priority      string
	mentions      []string
	routingReason string
	wakeupTargets []string
}

// outgoing is one message to send: who sends it, its text and priority, and
// whom the sender asked to wake.
type outgoing struct {
	contextID, name, text, priority string
	wake                            []string
}
