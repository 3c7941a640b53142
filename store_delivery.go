package main

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// delivery is one wake event of a member with how far it got: created when
// a message routed to the member was sent, notified when a session pushed
// notifications/resources/updated for it, delivered when a hook, `wait`, a channel or a
// tool put it in front of the agent, and read when it was acknowledged. The
// dashboard's Chats view and `crosstalk-mcp status` show these states.
type delivery struct {
	id        int64
	messageID int64
	contextID string
	relevance string
	priority  string
	createdAt string
	// notifiedAt is wakeup_events.last_notified_at, written by the
	// original and by this port alike.
	notifiedAt *string
	// deliveredAt and deliveredVia come from wakeup_deliveries, which only
	// this port writes; a wake event acknowledged without such a row was
	// delivered by a read tool (get_unread_messages and the like), at the
	// time it was acknowledged.
	deliveredAt  *string
	deliveredVia string
	readAt       *string
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
func (d delivery) state() string {
	switch {
	case d.readAt != nil:
		return "read"
	case d.deliveredAt != nil:
		return "delivered"
	case d.notifiedAt != nil:
		return "notified"
	}
	return "created"
}

// deliveriesTable is this port's record of how mail reached a member. It is
// a table of its own rather than new columns on wakeup_events so that the
// Python original, which never reads unknown tables, keeps working on the
// same files; the original's 7-day purge of acknowledged wake events is
// mirrored here by recordDeliveries.
const deliveriesTable = `CREATE TABLE IF NOT EXISTS wakeup_deliveries (
    message_id INTEGER NOT NULL,
    context_id TEXT NOT NULL,
    delivered_at TEXT NOT NULL,
    delivered_via TEXT NOT NULL,
    PRIMARY KEY (message_id, context_id)
)`

// tokensTable records the name (never the token) of the per-agent HTTP
// token each message was sent through, for the dashboard. Like
// wakeup_deliveries it is a table of this port's own, which the original
// never reads, and the first such send creates it, so that a directory used
// without per-agent tokens keeps exactly the original's schema.
const tokensTable = `CREATE TABLE IF NOT EXISTS message_tokens (
    message_id INTEGER PRIMARY KEY,
    token_name TEXT NOT NULL
)`

// recordTokenNames records, in the send's transaction, the token name of
// each message of chunk (whose ids are first, first+1, …) that has one.
func recordTokenNames(tx groupTx, chunk []routedSend, first int64) error {
	var args []any
	for k, p := range chunk {
		if p.msg.token != "" {
			args = append(args, first+int64(k), p.msg.token)
		}
	}
	if len(args) == 0 {
		return nil
	}
	if _, err := tx.Exec(tokensTable); err != nil {
		return err
	}
	_, err := tx.Exec(valuesSQL("INSERT OR REPLACE INTO message_tokens(message_id, token_name) VALUES ", 2, len(args)/2), args...)
	return err
}

// hasTable reports whether a group database has table name yet: a group
// only the original has written to has neither wakeup_deliveries nor
// message_tokens.
func hasTable(q queryer, name string) (bool, error) {
	var n int
	err := q.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?", name).Scan(&n)
	return n > 0, err
}

// deliveryColumns returns the delivered_at, delivered_via columns of the
// message and member that messageCol and contextCol name, and the join
// that reads them (no join in a group that has no wakeup_deliveries yet).
// A wake event w acknowledged without a row there was delivered by a read
// tool when it was acknowledged; delivered_via is empty while undelivered.
func deliveryColumns(q queryer, messageCol, contextCol string) (cols, join string, err error) {
	at, via := "w.acknowledged_at", "IIF(w.acknowledged_at IS NULL, '', '"+viaTool+"')"
	has, err := hasTable(q, "wakeup_deliveries")
	if err != nil || !has {
		return at + ", " + via, "", err
	}
	return "COALESCE(d.delivered_at, " + at + "), COALESCE(d.delivered_via, " + via + ")",
		" LEFT JOIN wakeup_deliveries d ON d.message_id = " + messageCol + " AND d.context_id = " + contextCol, nil
}

// wakeupDeliveries returns the wake events of one group, oldest first, with
// their delivery states: every member's when contextID is empty. limit caps
// the newest rows returned (0 means all). q is any handle on the group's
// database: the dashboard passes its read-only one, `status` a store's.
func wakeupDeliveries(q queryer, contextID string, limit int) ([]delivery, error) {
	delivered, join, err := deliveryColumns(q, "w.message_id", "w.context_id")
	if err != nil {
		return nil, err
	}
	query := "SELECT w.id, w.message_id, w.context_id, w.relevance, w.priority, w.created_at, w.last_notified_at, w.acknowledged_at, " +
		delivered + " FROM wakeup_events w" + join
	var args []any
	if contextID != "" {
		query += " WHERE w.context_id = ?"
		args = append(args, contextID)
	}
	query += " ORDER BY w.id DESC"
	if limit > 0 {
		query += " LIMIT ?"
		args = append(args, limit)
	}
	rows, err := q.QueryContext(context.Background(), query, args...)
	out, err := collectRows(rows, err, func(row rowScanner) (d delivery, err error) {
		return d, row.Scan(&d.id, &d.messageID, &d.contextID, &d.relevance, &d.priority, &d.createdAt,
			&d.notifiedAt, &d.readAt, &d.deliveredAt, &d.deliveredVia)
	})
	// Oldest first reads as a timeline; the query took the newest.
	slices.Reverse(out)
	return out, err
}

// recordDeliveries marks messageIDs delivered to contextID by via in tx,
// creating the table on first use and purging rows whose wake events the
// 7-day retention has removed.
func (s *store) recordDeliveries(tx groupTx, contextID, via string, messageIDs []int64) error {
	if len(messageIDs) == 0 {
		return nil
	}
	if _, err := tx.Exec(deliveriesTable); err != nil {
		return err
	}
	now := s.timestamp()
	for _, id := range messageIDs {
		if _, err := tx.Exec("INSERT INTO wakeup_deliveries(message_id, context_id, delivered_at, delivered_via) VALUES (?, ?, ?, ?) "+
			"ON CONFLICT(message_id, context_id) DO UPDATE SET delivered_at = excluded.delivered_at, delivered_via = excluded.delivered_via",
			id, contextID, now, via); err != nil {
			return err
		}
	}
	_, err := tx.Exec("DELETE FROM wakeup_deliveries WHERE NOT EXISTS (SELECT 1 FROM wakeup_events w " +
		"WHERE w.message_id = wakeup_deliveries.message_id AND w.context_id = wakeup_deliveries.context_id) " +
		"AND NOT EXISTS (SELECT 1 FROM member_unread_messages u WHERE u.message_id = wakeup_deliveries.message_id AND u.context_id = wakeup_deliveries.context_id)")
	return err
}

// membership is one group a context has joined, with what waits for it.
type membership struct {
	groupID   string
	groupName string
	name      string // the member's name in the group
	unread    int64
	wakeups   int64 // unacknowledged wake events
}

// memberships lists every group in the store's directory that contextID has
// joined, sorted by group id. Groups that vanish or are busy while being
// read are skipped: a hook must answer quickly and the next one will see
// them.
func (s *store) memberships(contextID string) ([]membership, error) {
	names, err := filepath.Glob(filepath.Join(s.dir, "grp_*.sqlite3"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []membership
	for _, path := range names {
		id, ok := groupIDOfFile(filepath.Base(path))
		if !ok {
			continue
		}
		m := membership{groupID: id}
		found := false
		err := s.withGroup(id, func(db *sql.DB) error {
			err := db.QueryRow("SELECT name, unread_count, "+
				"(SELECT COUNT(*) FROM wakeup_events WHERE context_id = ?1 AND acknowledged_at IS NULL), "+
				"COALESCE((SELECT name FROM group_metadata WHERE id = 1), '') "+
				"FROM group_members WHERE context_id = ?1", contextID).Scan(&m.name, &m.unread, &m.wakeups, &m.groupName)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			found = err == nil
			return err
		})
		var te *domainError
		if err != nil && (isBusy(err) || errors.As(err, &te)) {
			continue
		}
		if err != nil {
			// A file no server can use must not silence every member's hooks.
			if problem := checkGroupFile(path); problem != nil {
				s.damaged.warn(path, problem)
				continue
			}
			return nil, err
		}
		if found {
			out = append(out, m)
		}
	}
	return out, nil
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

// pendingMail returns a member's unread messages in one group, oldest first.
func (s *store) pendingMail(g membership, contextID string) ([]pendingMessage, error) {
	var out []pendingMessage
	err := s.withGroup(g.groupID, func(db *sql.DB) error {
		rows, err := db.Query("SELECT m.id, m.sender_context_id, m.sender_name, m.content, m.created_at, m.priority, m.mentions, m.wakeup_targets, m.routing_reason, "+
			"w.relevance FROM member_unread_messages u JOIN messages m ON m.id = u.message_id "+
			"LEFT JOIN wakeup_events w ON w.message_id = u.message_id AND w.context_id = u.context_id AND w.acknowledged_at IS NULL "+
			"WHERE u.context_id = ? ORDER BY m.id ASC", contextID)
		out, err = collectRows(rows, err, func(row rowScanner) (pendingMessage, error) {
			var relevance sql.NullString
			msg, err := scanMessage(row, &relevance)
			return pendingMessage{groupID: g.groupID, groupName: g.groupName, msg: msg, wakes: relevance.Valid, relevance: relevance.String}, err
		})
		return err
	})
	return out, err
}

// deliverMessages completes the delivery of messages of contextID that a
// hook or waiter claimed (claimForHook, claimWaitWakeup: the claim recorded
// the path) once they were written out. Those in read it marks read,
// exactly as get_unread_messages does for the messages it returns; those in
// previewed, of which the member saw only a part, stay unread and only have
// their wake events acknowledged. Messages a concurrent reader took
// meanwhile are left as that reader left them: only unread rows and
// unacknowledged wake events are touched.
func (s *store) deliverMessages(groupID, contextID string, read, previewed []int64) error {
	if len(read)+len(previewed) == 0 {
		return nil
	}
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

// sqlIn returns the condition "col IN (?, ?...)" for ids and its arguments.
func sqlIn(col string, ids []int64) (string, []any) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return col + " IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ") + ")", args
}

// wakeNotice is a wake event `wait` claimed: enough to tell the agent who
// wrote, where and why it is being woken. cut says the text is longer than
// the notice shows, so the message stays unread.
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

// claimWaitWakeup claims the oldest unacknowledged, undelivered wake event
// of contextID in group g created before notBefore, records it delivered
// by wait and returns it, nil when there is none; `wait` marks the message
// read once its notice is written, or when longer than maxText, which the
// notice cuts, only acknowledges it. notBefore leaves a running session's
// own paths (a tool call, a hook) the first chance at fresh mail. The check
// reads first and writes only when there is something to claim, because
// every write wakes every watcher of the directory; the write re-checks
// inside its transaction, so no other path can deliver the same message.
func (s *store) claimWaitWakeup(g membership, contextID string, notBefore time.Time, maxText int) (*wakeNotice, error) {
	cutoff := formatTimestamp(notBefore)
	find := func(queryRow func(string, ...any) rowScanner, has bool) (*wakeNotice, error) {
		query := "SELECT w.message_id, w.priority, w.relevance, m.sender_name, m.content FROM wakeup_events w JOIN messages m ON m.id = w.message_id " +
			"WHERE w.context_id = ?1 AND w.acknowledged_at IS NULL AND w.created_at <= ?2"
		if has {
			query += undelivered
		}
		n := wakeNotice{groupID: g.groupID, groupName: g.groupName}
		err := queryRow(query+" ORDER BY w.id ASC LIMIT 1", contextID, cutoff).Scan(&n.messageID, &n.priority, &n.relevance, &n.sender, &n.text)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		n.cut = len(n.text) > maxText
		return &n, nil
	}
	var found *wakeNotice
	err := s.withGroup(g.groupID, func(db *sql.DB) error {
		has, err := hasTable(db, "wakeup_deliveries")
		if err != nil {
			return err
		}
		found, err = find(func(q string, args ...any) rowScanner { return db.QueryRow(q, args...) }, has)
		return err
	})
	if err != nil || found == nil {
		return nil, err
	}
	var claimed *wakeNotice
	err = s.writeGroup(g.groupID, func(tx groupTx) (err error) {
		if _, err = tx.Exec(deliveriesTable); err != nil {
			return err
		}
		if claimed, err = find(tx.QueryRow, true); err != nil || claimed == nil {
			return err
		}
		return s.recordDeliveries(tx, contextID, viaWait, []int64{claimed.messageID})
	})
	return claimed, err
}

// claimForHook records those of ids that are still unread and that no path
// has delivered yet as delivered by hook, and returns them: a hook prints
// only what it claimed, before printing, so that a waiter or another hook
// racing it stays silent about the same message.
func (s *store) claimForHook(groupID, contextID string, ids []int64) (map[int64]bool, error) {
	claimed := map[int64]bool{}
	err := s.writeGroup(groupID, func(tx groupTx) error {
		clear(claimed)
		if _, err := tx.Exec(deliveriesTable); err != nil {
			return err
		}
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

// claimForChannel records the message of contextID's wake event eventID as
// delivered by channel and returns it, or nil when the event is
// acknowledged, its message read or already delivered by some path.
func (s *store) claimForChannel(groupID, contextID string, eventID int64) (*wakeNotice, error) {
	var claimed *wakeNotice
	err := s.writeGroup(groupID, func(tx groupTx) error {
		claimed = nil
		if _, err := tx.Exec(deliveriesTable); err != nil {
			return err
		}
		n := wakeNotice{groupID: groupID}
		err := tx.QueryRow("SELECT w.message_id, w.priority, m.sender_name, m.content, COALESCE((SELECT name FROM group_metadata WHERE id = 1), '') "+
			"FROM wakeup_events w JOIN messages m ON m.id = w.message_id WHERE w.id = ?1 AND w.context_id = ?2 AND w.acknowledged_at IS NULL "+
			"AND EXISTS (SELECT 1 FROM member_unread_messages u WHERE u.message_id = w.message_id AND u.context_id = w.context_id)"+undelivered,
			eventID, contextID).Scan(&n.messageID, &n.priority, &n.sender, &n.text, &n.groupName)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
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
// messages stay unread: a Stop hook only tells the agent to read them, since
// Claude Code shows a Stop block's reason twice.
func (s *store) claimStopWakeups(groupID, contextID string) ([]wakeNotice, error) {
	var out []wakeNotice
	err := s.writeGroup(groupID, func(tx groupTx) error {
		if _, err := tx.Exec(deliveriesTable); err != nil {
			return err
		}
		rows, err := tx.Query("SELECT w.message_id, m.sender_name, w.relevance FROM wakeup_events w JOIN messages m ON m.id = w.message_id "+
			"WHERE w.context_id = ? AND w.acknowledged_at IS NULL"+undelivered+" ORDER BY w.id", contextID)
		out, err = collectRows(rows, err, func(row rowScanner) (w wakeNotice, err error) {
			return w, row.Scan(&w.messageID, &w.sender, &w.relevance)
		})
		if err != nil || len(out) == 0 {
			return err
		}
		ids := make([]int64, len(out))
		for i, w := range out {
			ids[i] = w.messageID
		}
		in, args := sqlIn("message_id", ids)
		return s.acknowledgeWakeups(tx, contextID, in, args)
	})
	return out, err
}
