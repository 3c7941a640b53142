package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// delivery is one wake event of a member with how far it got, as Chats and
// `status` show it: created, notified (a session pushed an update), delivered
// (a hook, `wait`, a channel or a tool showed it) or read (acknowledged).
type delivery struct {
	id         int64
	messageID  int64
	contextID  string
	relevance  string
	priority   string
	createdAt  string
	notifiedAt *string // wakeup_events.last_notified_at, which the original writes too
	// deliveredAt and deliveredVia come from wakeup_deliveries, or from the
	// acknowledgement when a read tool delivered it (deliveryColumns).
	deliveredAt  *string
	deliveredVia string
	// acknowledgedAt is wakeup_events.acknowledged_at, as the wakeup resource
	// shows it; readAt is that time only once the message is read, since a
	// Stop notice or a preview acknowledges an event whose message stays unread.
	acknowledgedAt, readAt *string
}

// Delivery routes recorded in wakeup_deliveries.delivered_via.
const (
	viaHook           = "hook"
	viaWait           = "wait"
	viaTool           = "tool"
	viaWaitForMessage = "wait_for_messages"
	viaChannel        = "channel" // a Claude Code channel event (routing_channels.go)
)

// state names the furthest state the wake event reached.
func (d delivery) state() string { return d.furthest(d.readAt != nil, "created") }

// furthest names the furthest of read, delivered and notified that d
// reached, or none when it reached none of them.
func (d delivery) furthest(read bool, none string) string {
	switch {
	case read:
		return "read"
	case d.deliveredAt != nil:
		return "delivered"
	case d.notifiedAt != nil:
		return "notified"
	}
	return none
}

// deliveriesTable is this port's record of how mail reached a member: a
// table of its own rather than new columns on wakeup_events, so that the
// original, which never reads unknown tables, keeps working on the files.
const deliveriesTable = `CREATE TABLE IF NOT EXISTS wakeup_deliveries (
    message_id INTEGER NOT NULL,
    context_id TEXT NOT NULL,
    delivered_at TEXT NOT NULL,
    delivered_via TEXT NOT NULL,
    PRIMARY KEY (message_id, context_id)
)`

// deliveryColumns returns the delivered_at, delivered_via columns of the
// message and member that messageCol and contextCol name, and the join that
// reads them (none while the group has no wakeup_deliveries). A wake event w
// acknowledged without a row there was delivered by a read tool, or, while
// unread (the caller's SQL condition that the member has not read it), by a
// Stop hook's notice.
func deliveryColumns(q queryer, messageCol, contextCol, unread string) (cols, join string, err error) {
	at, via := "w.acknowledged_at", "IIF(w.acknowledged_at IS NULL, '', IIF("+unread+", '"+viaHook+"', '"+viaTool+"'))"
	tables, err := tableNames(context.Background(), q)
	if err != nil || !tables["wakeup_deliveries"] {
		return at + ", " + via, "", err
	}
	return "COALESCE(d.delivered_at, " + at + "), COALESCE(d.delivered_via, " + via + ")",
		" LEFT JOIN wakeup_deliveries d ON d.message_id = " + messageCol + " AND d.context_id = " + contextCol, nil
}

// wakeupDeliveries returns the wake events of one group (every member's when
// contextID is empty), oldest first, with their delivery states; limit caps
// the newest rows returned (0 means all). With waitingFirst they come as the
// dashboard lists them: waiting (unacknowledged) ones first, then newest.
// q may be a read-only handle.
func wakeupDeliveries(q queryer, contextID string, limit int, waitingFirst bool) ([]delivery, error) {
	unread := "EXISTS (SELECT 1 FROM member_unread_messages u WHERE u.message_id = w.message_id AND u.context_id = w.context_id)"
	delivered, join, err := deliveryColumns(q, "w.message_id", "w.context_id", unread)
	if err != nil {
		return nil, err
	}
	query := "SELECT w.id, w.message_id, w.context_id, w.relevance, w.priority, w.created_at, w.last_notified_at, w.acknowledged_at, " +
		"IIF(" + unread + ", NULL, w.acknowledged_at), " + delivered + " FROM wakeup_events w" + join
	var args []any
	if contextID != "" {
		query += " WHERE w.context_id = ?"
		args = append(args, contextID)
	}
	query += " ORDER BY " + map[bool]string{true: "w.acknowledged_at IS NULL DESC, "}[waitingFirst] + "w.id DESC"
	if limit > 0 {
		query += " LIMIT ?"
		args = append(args, limit)
	}
	out, err := queryAll(context.Background(), q, func(row rowScanner) (d delivery, err error) {
		return d, row.Scan(&d.id, &d.messageID, &d.contextID, &d.relevance, &d.priority, &d.createdAt,
			&d.notifiedAt, &d.acknowledgedAt, &d.readAt, &d.deliveredAt, &d.deliveredVia)
	}, query, args...)
	if !waitingFirst { // oldest first reads as a timeline; the query took the newest
		slices.Reverse(out)
	}
	return out, err
}

// recordDeliveries marks messageIDs delivered to contextID by via in tx,
// creating the table on first use and purging rows whose wake events the
// original's 7-day retention has removed.
func (s *store) recordDeliveries(tx groupTx, contextID, via string, messageIDs []int64) error {
	if _, err := tx.Exec(deliveriesTable); err != nil {
		return err
	}
	in, args := sqlIn("id", messageIDs)
	if _, err := tx.Exec("INSERT INTO wakeup_deliveries(message_id, context_id, delivered_at, delivered_via) SELECT id, ?, ?, ? FROM messages WHERE "+in+
		" ON CONFLICT(message_id, context_id) DO UPDATE SET delivered_at = excluded.delivered_at, delivered_via = excluded.delivered_via",
		append([]any{contextID, s.timestamp(), via}, args...)...); err != nil {
		return err
	}
	_, err := tx.Exec("DELETE FROM wakeup_deliveries WHERE NOT EXISTS (SELECT 1 FROM wakeup_events w " +
		"WHERE w.message_id = wakeup_deliveries.message_id AND w.context_id = wakeup_deliveries.context_id) " +
		"AND NOT EXISTS (SELECT 1 FROM member_unread_messages u WHERE u.message_id = wakeup_deliveries.message_id AND u.context_id = wakeup_deliveries.context_id)")
	return err
}

// deliverMessages completes the delivery of messages of contextID that a
// hook or waiter claimed, once they were written out: those in read are
// marked read as get_unread_messages marks them; those in previewed, seen
// only in part, stay unread with their wake events acknowledged. Only unread
// rows and unacknowledged wake events are touched, so a concurrent reader's
// marks stand.
func (s *store) deliverMessages(groupID, contextID string, read, previewed []int64) error {
	return s.writeGroup(groupID, func(tx groupTx) error {
		if len(read) > 0 {
			in, args := sqlIn("message_id", read)
			if err := s.markRead(tx, contextID, in, args, false); err != nil {
				return err
			}
		}
		if len(previewed) == 0 {
			return nil
		}
		in, args := sqlIn("message_id", previewed)
		return s.acknowledgeWakeups(tx, contextID, in, args)
	})
}

// sqlIn returns the condition that col is one of ids and its argument: one
// JSON array, as ids may outnumber the parameters SQLite binds (32,766).
func sqlIn(col string, ids []int64) (string, []any) {
	list, _ := json.Marshal(ids)
	return col + " IN (SELECT value FROM json_each(?))", []any{string(list)}
}

// wakeNotice is a claimed wake event: who wrote, where and why. cut says the
// text is longer than the notice shows, so the message stays unread.
type wakeNotice struct {
	groupID   string
	groupName string
	messageID int64
	sender    string
	priority  string
	relevance string
	text      string
	cut       bool
}

// undelivered is the SQL condition, over wakeup_events w, that no path has
// delivered w's message to its member yet: each message reaches a session
// once, whichever of hook, wait, channel or tool gets there first.
const undelivered = " AND NOT EXISTS (SELECT 1 FROM wakeup_deliveries d WHERE d.message_id = w.message_id AND d.context_id = w.context_id)"

// writeDeliveries runs fn in a write transaction of group id once
// wakeup_deliveries exists there, as every claim reads it.
func (s *store) writeDeliveries(id string, fn func(tx groupTx) error) error {
	return s.writeGroup(id, func(tx groupTx) error {
		if _, err := tx.Exec(deliveriesTable); err != nil {
			return err
		}
		return fn(tx)
	})
}

// claimWaitWakeup claims the oldest unacknowledged, undelivered wake event
// of contextID in group g created before notBefore, records it delivered by
// wait and returns it, nil when there is none; cut is set when its text is
// longer than maxText. notBefore leaves a running session's own paths the
// first chance at fresh mail. It reads first and writes only when there is
// something to claim, as every write wakes every watcher of the directory;
// the write re-checks inside its transaction.
func (s *store) claimWaitWakeup(g membership, contextID string, notBefore time.Time, maxText int) (*wakeNotice, error) {
	cutoff := formatTimestamp(notBefore)
	find := func(queryRow func(string, ...any) rowScanner, has bool) (*wakeNotice, error) {
		query := "SELECT w.message_id, w.priority, w.relevance, m.sender_name, m.content FROM wakeup_events w JOIN messages m ON m.id = w.message_id " +
			"WHERE w.context_id = ?1 AND w.acknowledged_at IS NULL AND w.created_at <= ?2"
		if has {
			query += undelivered
		}
		n := wakeNotice{groupID: g.groupID, groupName: g.groupName}
		found, err := rowFound(queryRow(query+" ORDER BY w.id ASC LIMIT 1", contextID, cutoff).Scan(&n.messageID, &n.priority, &n.relevance, &n.sender, &n.text))
		if !found {
			return nil, err
		}
		n.cut = len(n.text) > maxText
		return &n, nil
	}
	var found *wakeNotice
	err := s.withGroup(g.groupID, func(db *sql.DB) error {
		tables, err := tableNames(context.Background(), db)
		if err != nil {
			return err
		}
		found, err = find(func(q string, args ...any) rowScanner { return db.QueryRow(q, args...) }, tables["wakeup_deliveries"])
		return err
	})
	if err != nil || found == nil {
		return nil, err
	}
	var claimed *wakeNotice
	err = s.writeDeliveries(g.groupID, func(tx groupTx) (err error) {
		if claimed, err = find(tx.QueryRow, true); err != nil || claimed == nil {
			return err
		}
		return s.recordDeliveries(tx, contextID, viaWait, []int64{claimed.messageID})
	})
	return claimed, err
}

// claimForHook records those of ids still unread and undelivered as
// delivered by hook, and returns them: a hook prints only what it claimed,
// so that a waiter or another hook racing it stays silent about them.
func (s *store) claimForHook(groupID, contextID string, ids []int64) (map[int64]bool, error) {
	claimed := map[int64]bool{}
	err := s.writeDeliveries(groupID, func(tx groupTx) error {
		clear(claimed)
		now := s.timestamp()
		for _, id := range ids {
			res, err := tx.Exec("INSERT INTO wakeup_deliveries(message_id, context_id, delivered_at, delivered_via) "+
				"SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM member_unread_messages WHERE message_id = ?1 AND context_id = ?2) "+
				"AND NOT EXISTS (SELECT 1 FROM wakeup_deliveries WHERE message_id = ?1 AND context_id = ?2)", id, contextID, now, viaHook)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n > 0 {
				claimed[id] = true
			}
		}
		return nil
	})
	return claimed, err
}

// releaseClaim removes the delivery rows by via of contextID's ids that a
// claim recorded, when what it claimed could not be written out: the mail
// then stays pending for the next hook, waiter or Stop, as before the claim.
func (s *store) releaseClaim(groupID, contextID, via string, ids []int64) error {
	in, args := sqlIn("message_id", ids)
	return s.writeGroup(groupID, func(tx groupTx) error {
		_, err := tx.Exec("DELETE FROM wakeup_deliveries WHERE context_id = ? AND delivered_via = ? AND "+in, append([]any{contextID, via}, args...)...)
		return err
	})
}

// claimForChannel records the message of contextID's wake event eventID as
// delivered by channel and returns it, or nil when the event is
// acknowledged, its message read or already delivered by some path.
func (s *store) claimForChannel(groupID, contextID string, eventID int64) (*wakeNotice, error) {
	var claimed *wakeNotice
	err := s.writeDeliveries(groupID, func(tx groupTx) error {
		claimed = nil
		n := wakeNotice{groupID: groupID}
		found, err := rowFound(tx.QueryRow("SELECT w.message_id, w.priority, m.sender_name, m.content, COALESCE((SELECT name FROM group_metadata WHERE id = 1), '') "+
			"FROM wakeup_events w JOIN messages m ON m.id = w.message_id WHERE w.id = ?1 AND w.context_id = ?2 AND w.acknowledged_at IS NULL "+
			"AND EXISTS (SELECT 1 FROM member_unread_messages u WHERE u.message_id = w.message_id AND u.context_id = w.context_id)"+undelivered,
			eventID, contextID).Scan(&n.messageID, &n.priority, &n.sender, &n.text, &n.groupName))
		if !found {
			return err
		}
		claimed = &n
		return s.recordDeliveries(tx, contextID, viaChannel, []int64{n.messageID})
	})
	return claimed, err
}

// claimStopWakeups acknowledges contextID's undelivered wake events in
// groupID and returns them (message id, sender and relevance), in one
// transaction so that a waiter racing the Stop hook finds them taken. The
// messages stay unread: Claude Code shows a Stop block's reason twice, so
// the hook only tells the agent to read them.
func (s *store) claimStopWakeups(groupID, contextID string) ([]wakeNotice, error) {
	var out []wakeNotice
	err := s.writeDeliveries(groupID, func(tx groupTx) error {
		rows, err := tx.Query("SELECT w.message_id, m.sender_name, w.relevance FROM wakeup_events w JOIN messages m ON m.id = w.message_id "+
			"WHERE w.context_id = ? AND w.acknowledged_at IS NULL"+undelivered+" ORDER BY w.id", contextID)
		out, err = collectRows(rows, err, func(row rowScanner) (w wakeNotice, err error) {
			return w, row.Scan(&w.messageID, &w.sender, &w.relevance)
		})
		if err != nil || len(out) == 0 {
			return err
		}
		in, args := sqlIn("message_id", mapSlice(out, func(w wakeNotice) int64 { return w.messageID }))
		return s.acknowledgeWakeups(tx, contextID, in, args)
	})
	return out, err
}

// releaseStopWakeups re-arms contextID's wake events for ids that
// claimStopWakeups acknowledged when the Stop notice could not be written
// out, those whose message is still unread: the next Stop or waiter tells
// of them again.
func (s *store) releaseStopWakeups(groupID, contextID string, ids []int64) error {
	in, args := sqlIn("message_id", ids)
	return s.writeGroup(groupID, func(tx groupTx) error {
		_, err := tx.Exec("UPDATE wakeup_events SET acknowledged_at = NULL WHERE context_id = ?1 AND message_id IN "+
			"(SELECT message_id FROM member_unread_messages WHERE context_id = ?1) AND "+in, append([]any{contextID}, args...)...)
		if err != nil {
			return err
		}
		return bumpRevisions(tx, "wakeup_revision")
	})
}

// receipt is how far one message got with one of its recipients (every
// current member but the sender, as joining makes earlier messages unread).
// Its delivery holds the recipient's wake event, if any; read says the
// message itself was read.
type receipt struct {
	delivery
	name string
	read bool
}

// state names the furthest state the message reached with the recipient;
// deliveredVia says by which path when it is "delivered".
func (r receipt) state() string { return r.furthest(r.read, "unread") }

// receiptsSegment names a member's receipts resource, beside its wakeup
// resource, which only this port serves.
const receiptsSegment = "/receipts/"

// receiptsWakeupURI returns the wakeup URI, by which it is authorized, of
// the same group and member as a receipts URI, and false for any other URI.
func receiptsWakeupURI(uri string) (string, bool) {
	if !strings.HasPrefix(uri, uriPrefix) || !strings.Contains(uri, receiptsSegment) {
		return "", false
	}
	return strings.Replace(uri, receiptsSegment, wakeupSegment, 1), true
}

// receiptLimit bounds the sent messages one receipts read covers, newest
// first: a sender asks how its latest messages fared, not for history.
const receiptLimit = 20

// sentReceipts returns the receipts of sender's newest limit messages in
// group id, by message id, oldest message first.
func (s *store) sentReceipts(id, sender string, limit int) (ids []int64, byMessage map[int64][]receipt, err error) {
	err = s.withGroup(id, func(db *sql.DB) error {
		ctx := context.Background()
		rows, err := db.QueryContext(ctx, "SELECT id FROM messages WHERE sender_context_id = ? ORDER BY id DESC LIMIT ?", sender, limit)
		ids, err = collectRows(rows, err, func(row rowScanner) (id int64, err error) { return id, row.Scan(&id) })
		if err != nil {
			return err
		}
		slices.Reverse(ids)
		byMessage, err = messageReceipts(ctx, db, ids)
		return err
	})
	return ids, byMessage, err
}

// messageReceipts returns every recipient's receipt of each of ids, in one
// query, recipients by context id. q may be a read-only handle.
func messageReceipts(ctx context.Context, q queryer, ids []int64) (map[int64][]receipt, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	delivered, join, err := deliveryColumns(q, "m.id", "g.context_id", "u.message_id IS NOT NULL")
	if err != nil {
		return nil, err
	}
	in, args := sqlIn("m.id", ids)
	query := "SELECT m.id, g.context_id, " + shownName("g.name") + ", u.message_id IS NULL, IIF(u.message_id IS NULL, w.acknowledged_at, NULL), w.last_notified_at, " + delivered +
		" FROM messages m JOIN group_members g ON g.context_id != m.sender_context_id" +
		" LEFT JOIN member_unread_messages u ON u.message_id = m.id AND u.context_id = g.context_id" +
		" LEFT JOIN wakeup_events w ON w.message_id = m.id AND w.context_id = g.context_id" + join +
		" WHERE " + in +
		" ORDER BY m.id, g.context_id"
	list, err := queryAll(ctx, q, func(row rowScanner) (r receipt, err error) {
		return r, row.Scan(&r.messageID, &r.contextID, &r.name, &r.read, &r.readAt, &r.notifiedAt, &r.deliveredAt, &r.deliveredVia)
	}, query, args...)
	if err != nil {
		return nil, err
	}
	out := make(map[int64][]receipt, len(ids))
	for _, r := range list {
		out[r.messageID] = append(out[r.messageID], r)
	}
	return out, nil
}

// describeReceipts is one message's receipts on one line, for `status`
// and the dashboard's Chats: "bob read, carol delivered by hook".
func describeReceipts(rs []receipt) string {
	if len(rs) == 0 {
		return "no recipients"
	}
	return strings.Join(mapSlice(rs, func(r receipt) string {
		if r.state() == "delivered" {
			return r.name + " delivered by " + r.deliveredVia
		}
		return r.name + " " + r.state()
	}), ", ")
}

// wakeups lists a member's newest limit wake events (0: all), oldest first.
func (s *store) wakeups(id, contextID string, limit int) (out []delivery, err error) {
	err = s.withGroup(id, func(db *sql.DB) error {
		out, err = wakeupDeliveries(db, contextID, limit, false)
		return err
	})
	return out, err
}
