package main

import (
	"context"
	"database/sql"
	"slices"
	"strings"
)

// receipt is how far one message got with one of its recipients, as its
// sender may see it: read, or else delivered (by which path), notified, or
// only waiting. Every current member but the sender is a recipient: joining
// makes every earlier message unread for the new member, as in the
// original. Its delivery holds the message's wake event for the recipient,
// if it had one; read says the message itself was read.
type receipt struct {
	delivery
	name string
	read bool
}

// state names the furthest state the message reached with the recipient;
// deliveredVia says by which path when it is "delivered".
func (r receipt) state() string {
	switch {
	case r.read:
		return "read"
	case r.deliveredAt != nil:
		return "delivered"
	case r.notifiedAt != nil:
		return "notified"
	}
	return "unread"
}

// receiptsSegment names a member's receipts resource, beside its wakeup
// resource: how far the messages it sent got with each recipient. Only this
// port serves it.
const receiptsSegment = "/receipts/"

// receiptsWakeupURI returns the wakeup URI of the same group and member as
// a receipts URI, which is authorized exactly as that wakeup resource is,
// and false for any other URI.
func receiptsWakeupURI(uri string) (string, bool) {
	if !strings.HasPrefix(uri, uriPrefix) || !strings.Contains(uri, receiptsSegment) {
		return "", false
	}
	return strings.Replace(uri, receiptsSegment, wakeupSegment, 1), true
}

// receiptLimit bounds the sent messages one receipts read covers, newest
// first: a sender asks how its latest messages fared, not for history.
const receiptLimit = 20

// sentReceipts returns the receipts of sender's newest receiptLimit
// messages in group id, by message id, oldest message first. It only reads,
// so a Python server on the same file is unaffected.
func (s *store) sentReceipts(id, sender string) (ids []int64, byMessage map[int64][]receipt, err error) {
	err = s.withGroup(id, func(db *sql.DB) error {
		ctx := context.Background()
		rows, err := db.QueryContext(ctx, "SELECT id FROM messages WHERE sender_context_id = ? ORDER BY id DESC LIMIT ?", sender, receiptLimit)
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
// query, recipients by context id. q is any handle on the group's database:
// the dashboard passes its read-only one.
func messageReceipts(ctx context.Context, q queryer, ids []int64) (map[int64][]receipt, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	delivered, join, err := deliveryColumns(q, "m.id", "g.context_id")
	if err != nil {
		return nil, err
	}
	in, args := sqlIn("m.id", ids)
	query := "SELECT m.id, g.context_id, g.name, u.message_id IS NULL, w.acknowledged_at, w.last_notified_at, " + delivered +
		" FROM messages m JOIN group_members g ON g.context_id != m.sender_context_id" +
		" LEFT JOIN member_unread_messages u ON u.message_id = m.id AND u.context_id = g.context_id" +
		" LEFT JOIN wakeup_events w ON w.message_id = m.id AND w.context_id = g.context_id" + join +
		" WHERE " + in +
		" ORDER BY m.id, g.context_id"
	rows, err := q.QueryContext(ctx, query, args...)
	list, err := collectRows(rows, err, func(row rowScanner) (r receipt, err error) {
		return r, row.Scan(&r.messageID, &r.contextID, &r.name, &r.read, &r.readAt, &r.notifiedAt, &r.deliveredAt, &r.deliveredVia)
	})
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
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.name + " " + r.state()
		if r.state() == "delivered" {
			parts[i] += " by " + r.deliveredVia
		}
	}
	return strings.Join(parts, ", ")
}
